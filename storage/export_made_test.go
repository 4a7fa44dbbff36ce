package storage

import "github.com/devhook/devhook"

// EncodeAttempt and DecodeAttempt are the attempts bucket's encoding.
func EncodeAttempt(a *devhook.Attempt) []byte { return appendAttempt(nil, a) }

func DecodeAttempt(b []byte) (devhook.Attempt, error) { return decodeAttempt(nil, b) }
