// Package signature signs and verifies the service-signature header of the
// service's webhook deliveries.
//
// The header is "t=<unix milliseconds>,v1=<hex>", where hex is the lowercase
// HMAC-SHA256, keyed with the webhook secret's bytes, of the text of t, a
// period, and the raw body. Verify applies the checks in the order the
// reference receiver does, and the first that fails decides the verdict.
package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/devhook/devhook"
)

const (
	// Window is how old a signature may be: t must be newer than now-Window.
	Window = 5 * time.Minute
	// DefaultSkew is how far ahead of the receiver's clock t may be.
	DefaultSkew = 60 * time.Second
)

// Reference receiver answers.
const (
	TextMissing   = "Unauthorized: Missing Signature"
	TextFormat    = "Unauthorized: Invalid Signature Format"
	TextTime      = "Unauthorized: Invalid Time Value"
	TextSignature = "Unauthorized: Invalid signature"
	TextNoSecret  = "Internal Server Error"
)

// Sign returns the header value for body signed at time t.
func Sign(secret string, t time.Time, body []byte) string {
	return SignMillis(secret, t.UnixMilli(), body)
}

// SignMillis returns the header value for body signed at tms Unix milliseconds.
func SignMillis(secret string, tms int64, body []byte) string {
	ts := strconv.FormatInt(tms, 10)
	k := mac(secret, ts, body)
	v := "t=" + ts + ",v1=" + hex.EncodeToString(k.sum[:])
	keyed.Put(k)
	return v
}

// mac computes the MAC of ts and body with secret into the k.sum of a
// keyed MAC from the pool, which the caller puts back once it has read it.
func mac(secret, ts string, body []byte) *keyedMAC {
	k, _ := keyed.Get().(*keyedMAC)
	if k == nil || k.secret != secret {
		// Keying costs two SHA-256 blocks and the allocation of both
		// states: a keyed MAC is kept for the next delivery, which has
		// the same secret but for a rotation.
		k = &keyedMAC{secret: secret, h: hmac.New(sha256.New, []byte(secret))}
	} else {
		k.h.Reset()
	}
	k.buf = append(append(k.buf[:0], ts...), '.')
	k.h.Write(k.buf)
	k.h.Write(body)
	k.h.Sum(k.sum[:0]) // fits: no allocation
	return k
}

// macEqual reports whether got is the MAC of ts and body with secret.
func macEqual(secret, ts string, body, got []byte) bool {
	k := mac(secret, ts, body)
	eq := hmac.Equal(got, k.sum[:])
	keyed.Put(k)
	return eq
}

// decodeV1 decodes v1 as hex.DecodeString does, into buf when it fits:
// a v1 of a MAC's length, the common case, costs no allocation. hex.Decode
// reads v1's bytes in place (it does not write its source).
func decodeV1(buf *[sha256.Size]byte, v1 string) ([]byte, error) {
	if hex.DecodedLen(len(v1)) > len(buf) {
		return hex.DecodeString(v1) // longer than a MAC: it cannot match
	}
	n, err := hex.Decode(buf[:], unsafe.Slice(unsafe.StringData(v1), len(v1)))
	return buf[:n], err
}

// keyedMAC is an HMAC-SHA256 keyed with secret, ready for Reset and reuse.
type keyedMAC struct {
	secret string
	h      hash.Hash
	buf    []byte
	sum    [sha256.Size]byte // the last MAC computed
}

// keyed keeps keyed MACs between calls: a cache, not state, since a MAC
// is used only when its secret is the one asked for.
var keyed sync.Pool

// Parsed is a header split into its parts.
type Parsed struct {
	T    int64  // Unix milliseconds
	TRaw string // t as sent; the signed text
	V1   string // signature as sent
}

// Parse splits a header value of the form t=<digits>,v1=<value>. It fails
// unless there are exactly two comma-separated parts in that order and t is
// a non-negative decimal integer.
func Parse(header string) (Parsed, error) {
	first, second, ok := strings.Cut(header, ",")
	if !ok || strings.Contains(second, ",") {
		return Parsed{}, fmt.Errorf("want two comma-separated parts t=<ms>,v1=<hex>, got %d", strings.Count(header, ",")+1)
	}
	tk, tv, ok := strings.Cut(first, "=")
	if !ok || tk != "t" {
		return Parsed{}, fmt.Errorf("first part must be t=<unix milliseconds>")
	}
	vk, vv, ok := strings.Cut(second, "=")
	if !ok || vk != "v1" {
		return Parsed{}, fmt.Errorf("second part must be v1=<hex signature>")
	}
	if tv == "" || len(tv) > 19 || strings.Trim(tv, "0123456789") != "" {
		return Parsed{}, fmt.Errorf("t must be decimal digits (Unix milliseconds), got %q", clip(tv))
	}
	t, err := strconv.ParseInt(tv, 10, 64)
	if err != nil {
		return Parsed{}, fmt.Errorf("t is out of range: %q", clip(tv))
	}
	return Parsed{T: t, TRaw: tv, V1: vv}, nil
}

// Verifier checks headers against a secret. The zero value uses DefaultSkew
// and the system clock.
type Verifier struct {
	Skew time.Duration    // how far ahead t may be; 0 means DefaultSkew
	Now  func() time.Time // clock; nil means time.Now
}

// Verify checks header for body with the given secret at time now, using
// DefaultSkew.
func Verify(secret, header string, body []byte, now time.Time) devhook.Verdict {
	return Verifier{Now: func() time.Time { return now }}.Verify(secret, header, body)
}

// Verify checks header for body with the given secret. An empty secret
// means the receiver has none.
func (v Verifier) Verify(secret, header string, body []byte) devhook.Verdict {
	if header == "" {
		return devhook.Verdict{Result: devhook.VerdictMissingSignature, Status: 401, Text: TextMissing,
			Reason: "the request has no " + devhook.SignatureHeader + " header"}
	}
	p, err := Parse(header)
	if err != nil {
		return devhook.Verdict{Result: devhook.VerdictInvalidFormat, Status: 401, Text: TextFormat,
			Reason: "the " + devhook.SignatureHeader + " header is malformed: " + err.Error()}
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	skew := v.Skew
	if skew <= 0 {
		skew = DefaultSkew
	}
	nowMS := now().UnixMilli()
	switch {
	case p.T <= nowMS-Window.Milliseconds():
		return devhook.Verdict{Result: devhook.VerdictInvalidTime, Status: 401, Text: TextTime, T: p.T,
			Reason: fmt.Sprintf("t is %s old; the receiver accepts signatures newer than %s (replay it re-signed)",
				age(nowMS-p.T), Window)}
	case p.T > nowMS+skew.Milliseconds():
		return devhook.Verdict{Result: devhook.VerdictInvalidTime, Status: 401, Text: TextTime, T: p.T,
			Reason: fmt.Sprintf("t is %s ahead of this clock; at most %s ahead is accepted (check the clocks)",
				age(p.T-nowMS), skew)}
	}
	if secret == "" {
		return devhook.Verdict{Result: devhook.VerdictNoSecret, Status: 500, Text: TextNoSecret, T: p.T,
			Reason: "no signing secret is configured, so the signature cannot be checked"}
	}
	var buf [sha256.Size]byte
	got, err := decodeV1(&buf, p.V1)
	if p.V1 == "" || err != nil || p.V1 != strings.ToLower(p.V1) ||
		!macEqual(secret, p.TRaw, body, got) {
		reason := "the signature does not match this body and secret (wrong secret, or the body changed on the way)"
		switch {
		case p.V1 == "":
			reason = "v1 is empty"
		case err != nil:
			reason = "v1 is not hexadecimal"
		case p.V1 != strings.ToLower(p.V1):
			reason = "v1 must be lowercase hexadecimal"
		}
		return devhook.Verdict{Result: devhook.VerdictInvalidSignature, Status: 401, Text: TextSignature, T: p.T, Reason: reason}
	}
	return devhook.Verdict{Result: devhook.VerdictOK, Status: 200, Text: "OK", T: p.T, Reason: "signature valid"}
}

func age(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).Round(time.Millisecond).String()
}

func clip(s string) string {
	if len(s) > 32 {
		return s[:32] + "…"
	}
	return s
}
