package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// tokenRequest is one form-encoded POST to the token endpoint (the code
// exchange or a refresh). The interface has the client return "the token
// response body plus an expires_at field", so the answer is kept whole:
// the fields Tokens names go into it, every other field of the answer
// (expires_in, scope, ones a provider adds) into Extra. A non-2xx answer
// is an *HTTPError carrying the OAuth error code.
func (c *Client) tokenRequest(ctx context.Context, op, tokenURL string, form url.Values) (*Tokens, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("%s: the token endpoint %q: %w", op, tokenURL, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s at %s: %w", op, tokenURL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return nil, fmt.Errorf("%s at %s: reading the answer: %w", op, tokenURL, err)
	}
	fields, perr := tokenFields(resp.Header.Get("Content-Type"), b)
	if resp.StatusCode/100 != 2 {
		he := &HTTPError{Op: op, URL: tokenURL, Status: resp.StatusCode, Message: compactJSON(b)}
		if perr == nil {
			var code string
			if json.Unmarshal(fields["error"], &code) == nil {
				he.Code = code
			}
		}
		return nil, he
	}
	if perr != nil {
		return nil, fmt.Errorf("%s at %s: the answer is not a token response: %w", op, tokenURL, perr)
	}
	return c.tokensFrom(fields, tokenURL)
}

// tokenFields reads a token response: JSON, or the form encoding some
// providers answer with.
func tokenFields(contentType string, b []byte) (map[string]json.RawMessage, error) {
	mt, _, _ := mime.ParseMediaType(contentType)
	if mt == "application/x-www-form-urlencoded" || mt == "text/plain" {
		vals, err := url.ParseQuery(string(b))
		if err != nil {
			return nil, err
		}
		m := make(map[string]json.RawMessage, len(vals))
		for k := range vals {
			raw, _ := json.Marshal(vals.Get(k))
			m[k] = raw
		}
		return m, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if m == nil {
		return nil, fmt.Errorf("null, not an object")
	}
	return m, nil
}

// tokensFrom turns the fields of a token response into a record:
// expires_at is now + expires_in (DefaultExpiresIn when absent), the token
// type is Bearer when the answer says bearer or nothing, and the fields
// Tokens has no name for stay in Extra, expires_in among them.
func (c *Client) tokensFrom(fields map[string]json.RawMessage, tokenURL string) (*Tokens, error) {
	str := func(k string) (string, error) {
		raw, ok := fields[k]
		if !ok || string(raw) == "null" {
			return "", nil
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("%s is not a string", k)
		}
		return s, nil
	}
	out := &Tokens{TokenEndpoint: tokenURL, ClientID: c.cfg.ClientID}
	var err error
	for _, f := range []struct {
		k string
		v *string
	}{{"access_token", &out.AccessToken}, {"refresh_token", &out.RefreshToken}, {"token_type", &out.TokenType}, {"id_token", &out.IDToken}} {
		if *f.v, err = str(f.k); err != nil {
			return nil, fmt.Errorf("the token response: %w", err)
		}
	}
	if out.AccessToken == "" {
		return nil, fmt.Errorf("the token response from %s has no access_token", tokenURL)
	}
	if out.TokenType == "" || strings.EqualFold(out.TokenType, "bearer") {
		out.TokenType = "Bearer"
	}
	in := DefaultExpiresIn
	if raw, ok := fields["expires_in"]; ok {
		if secs, ok := expiresIn(raw); ok && secs > 0 {
			in = time.Duration(secs) * time.Second
		}
	}
	out.ExpiresAt = c.cfg.Now().Add(in).UTC().Truncate(time.Second)
	for k, v := range fields {
		switch k {
		case "access_token", "refresh_token", "token_type", "id_token", "expires_at":
			continue
		}
		if out.Extra == nil {
			out.Extra = make(map[string]json.RawMessage)
		}
		out.Extra[k] = v
	}
	return out, nil
}

// expiresIn reads expires_in as a JSON number or a string of digits.
func expiresIn(raw json.RawMessage) (int64, bool) {
	var n json.Number
	if err := json.Unmarshal(raw, &n); err == nil {
		if i, err := n.Int64(); err == nil {
			return i, true
		}
		if f, err := n.Float64(); err == nil {
			return int64(f), true
		}
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if i, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
			return i, true
		}
	}
	return 0, false
}
