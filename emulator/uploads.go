package emulator

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"time"
)

// Large inputs go the way the official clients send them: POST
// /v1/applications/{app}/runs/uploadurl answers {"upload_id", "upload_url"};
// the client PUTs the input to upload_url, with no credential (the URL is
// the credential, as a presigned storage URL is); then POST …/runs with
// {"upload_id": …} starts a run with it.
//
// An upload belongs to the account and application that asked for it and
// is single use: one PUT, then one run. Its URL carries a random token of
// its own (only the token's hash is kept), so that the upload id, which
// shows up in run requests, does not grant the PUT. An upload not used
// within UploadTTL is gone. With a data directory uploads are kept like
// runs, so that an input PUT before a restart can start a run after it.
//
// An uploaded input that is JSON is the run's input as is; anything else
// is text (the official clients upload text inputs this way): the run's
// input is that text as a JSON string, its format.input.type is "text",
// and input_size counts the uploaded bytes. Invalid UTF-8 in a text input
// becomes U+FFFD.

// pathUploads is where upload URLs point: /uploads/{token}, outside /v1
// as a storage URL is outside the API.
const pathUploads = "/uploads"

type upload struct {
	Account   string          `json:"account"`
	AppID     string          `json:"application_id"`
	ID        string          `json:"id"`
	TokenHash string          `json:"token_hash"`
	CreatedAt time.Time       `json:"created_at"`
	ExpiresAt time.Time       `json:"expires_at"`
	Uploaded  bool            `json:"uploaded"`
	Input     json.RawMessage `json:"input,omitempty"`
	Text      bool            `json:"text,omitempty"`
	Size      int64           `json:"size,omitempty"` // bytes PUT
}

// createUploadURL answers 200 {"upload_id", "upload_url"}. It reads no
// body: the official clients send none.
func (e *Emulator) createUploadURL(w http.ResponseWriter, r *http.Request, c *call) error {
	id, err := e.newID()
	if err != nil {
		return err
	}
	token, err := e.random("", 32)
	if err != nil {
		return err
	}
	now := e.now()
	u := &upload{Account: c.account, AppID: c.args["application_id"], ID: id, TokenHash: tokenKey(token),
		CreatedAt: now, ExpiresAt: now.Add(e.cfg.UploadTTL)}
	k := acctKey(c.account, id)
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.lookupApplication(c); err != nil {
		return err
	}
	ops := []op{{bucketUploads, k, u}}
	var expired []string
	for ek, eu := range e.st.uploads {
		if !now.Before(eu.ExpiresAt) {
			expired = append(expired, ek)
			ops = append(ops, op{bucketUploads, ek, nil})
		}
	}
	if err := e.persist(ops...); err != nil {
		return err
	}
	for _, ek := range expired {
		e.dropUpload(ek)
	}
	e.addUpload(k, u)
	writeJSON(w, http.StatusOK, map[string]string{
		"upload_id":  id,
		"upload_url": e.baseURL(r) + pathUploads + "/" + url.PathEscape(token),
	})
	return nil
}

// putUpload takes the input PUT to an upload URL: 200 with an empty body,
// as a storage service answers; 404 for a URL that is unknown, expired or
// already used; 413 beyond MaxUploadBytes; 400 for an empty body.
func (e *Emulator) putUpload(w http.ResponseWriter, r *http.Request, c *call) error {
	th := tokenKey(c.args["token"])
	e.mu.Lock()
	k, u := e.uploadByToken(th)
	e.mu.Unlock()
	if u == nil {
		return errUnknownUploadURL
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, e.cfg.MaxUploadBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return errorf(http.StatusRequestEntityTooLarge, "the input is larger than %d bytes, the largest upload", e.cfg.MaxUploadBytes)
		}
		return errorf(http.StatusBadRequest, "reading the input: %w", err)
	}
	if len(b) == 0 {
		return errorf(http.StatusBadRequest, "the input is empty; PUT the run's input (JSON or text)")
	}
	done := *u
	done.Uploaded, done.Size = true, int64(len(b))
	if json.Valid(b) {
		done.Input = json.RawMessage(b)
	} else {
		s, _ := json.Marshal(string(b)) // a string always marshals
		done.Input, done.Text = s, true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if k2, u2 := e.uploadByToken(th); u2 != u || k2 != k {
		return errUnknownUploadURL // another PUT came first
	}
	if err := e.persist(op{bucketUploads, k, &done}); err != nil {
		return err
	}
	e.st.uploads[k] = &done
	w.WriteHeader(http.StatusOK)
	return nil
}

var errUnknownUploadURL = errorf(http.StatusNotFound,
	"no upload at this URL: it is unknown, expired or already used; get a new one with POST /v1/applications/{application_id}/runs/uploadurl")

// uploadByToken returns the upload whose URL token hashes to th, when it
// has not expired and nothing was PUT to it yet. The caller holds e.mu.
func (e *Emulator) uploadByToken(th string) (string, *upload) {
	k, ok := e.st.uploadTokens[th]
	if !ok {
		return "", nil
	}
	u := e.st.uploads[k]
	if u == nil || u.Uploaded || !e.now().Before(u.ExpiresAt) {
		return "", nil
	}
	return k, u
}

// upload returns the account's upload id of application app, ready to
// start a run: 400 otherwise, since upload_id is a field of the request.
// The caller holds e.mu.
func (e *Emulator) upload(account, app, id string) (*upload, string, error) {
	k := acctKey(account, id)
	u := e.st.uploads[k]
	if u == nil || u.AppID != app || !e.now().Before(u.ExpiresAt) {
		return nil, "", errorf(http.StatusBadRequest,
			"upload_id %q is unknown, expired or already used by a run; get a new one with POST /v1/applications/%s/runs/uploadurl", id, url.PathEscape(app))
	}
	if !u.Uploaded {
		return nil, "", errorf(http.StatusBadRequest, "upload_id %q has no input yet; PUT the input to its upload_url first", id)
	}
	return u, k, nil
}

// addUpload and dropUpload keep the token index with the uploads. The
// caller holds e.mu.
func (e *Emulator) addUpload(k string, u *upload) {
	e.st.uploads[k] = u
	e.st.uploadTokens[u.TokenHash] = k
}

func (e *Emulator) dropUpload(k string) {
	if u := e.st.uploads[k]; u != nil {
		delete(e.st.uploadTokens, u.TokenHash)
	}
	delete(e.st.uploads, k)
}
