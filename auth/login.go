package auth

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"golang.org/x/oauth2"
)

// LoginOptions are the choices of one sign-in.
type LoginOptions struct {
	// Force signs out of the identity provider's browser session first:
	// the browser opens the end-session endpoint, which chains into a
	// fresh authorization.
	Force bool
	// IdentityProvider, when set, is sent as the identity_provider
	// parameter: sign in through that (single sign-on) provider.
	IdentityProvider string
}

// callback is what the browser brought back to the callback server.
type callback struct {
	code string
	err  error
}

// Login runs the PKCE authorization-code flow: discovery, a fresh verifier
// and state, the callback server on CallbackAddr, the browser at the
// authorization URL (or at the end-session URL with Force), the wait for
// the redirect (ErrTimeout after BrowserTimeout), and the code exchange.
// An error the provider sends back is a *ProviderError; a failing exchange
// an *HTTPError. The caller saves the tokens (Store.Save).
func (c *Client) Login(ctx context.Context, opts LoginOptions) (*Tokens, error) {
	e, err := c.Endpoints(ctx)
	if err != nil {
		return nil, fmt.Errorf("sign in: %w", err)
	}
	if opts.Force && e.EndSession == "" {
		return nil, fmt.Errorf("sign in with force: %w; sign out in the browser, then sign in without forcing", ErrNoEndSession)
	}
	verifier, err := c.random(32)
	if err != nil {
		return nil, err
	}
	state, err := c.random(16)
	if err != nil {
		return nil, err
	}

	ln, err := net.Listen("tcp", c.cfg.CallbackAddr)
	if err != nil {
		return nil, fmt.Errorf("start the sign-in callback server on %s (is another devhook login running? end it, or free the port): %w", c.cfg.CallbackAddr, err)
	}
	redirectURI := "http://" + ln.Addr().String() + "/"
	oc := c.oauthConfig(e, redirectURI)
	params := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier)}
	if opts.IdentityProvider != "" {
		params = append(params, oauth2.SetAuthURLParam("identity_provider", opts.IdentityProvider))
	}
	browseTo := oc.AuthCodeURL(state, params...)
	if opts.Force {
		if browseTo, err = chain(e.EndSession, browseTo); err != nil {
			ln.Close()
			return nil, err
		}
	}

	results := make(chan callback, 1)
	srv := &http.Server{Handler: callbackHandler(state, results), ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		srv.Serve(ln) // ends with ErrServerClosed when stopped below
	}()
	defer func() {
		// Let the browser's request finish, then stop.
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if srv.Shutdown(sctx) != nil {
			srv.Close()
		}
		wg.Wait()
	}()

	wctx, cancel := context.WithTimeout(ctx, c.cfg.BrowserTimeout)
	defer cancel()
	if err := c.cfg.OpenBrowser(wctx, browseTo); err != nil {
		return nil, fmt.Errorf("%w at the sign-in page: %w", ErrBrowser, err)
	}
	var res callback
	select {
	case res = <-results:
	case <-wctx.Done():
		if ctx.Err() != nil {
			return nil, fmt.Errorf("sign in: %w", ctx.Err())
		}
		return nil, fmt.Errorf("%w: the browser did not come back to %s within %s", ErrTimeout, redirectURI, c.cfg.BrowserTimeout)
	}
	if res.err != nil {
		return nil, res.err
	}
	form := url.Values{"grant_type": {"authorization_code"}, "code": {res.code}, "redirect_uri": {redirectURI},
		"client_id": {c.cfg.ClientID}, "code_verifier": {verifier}}
	return c.tokenRequest(ctx, "exchange the authorization code for tokens", e.Token, form)
}

// chain builds the end-session URL that clears the provider's session and
// chains into the authorization: client_id and every authorization
// parameter go along.
func chain(endSession, authURL string) (string, error) {
	es, err := url.Parse(endSession)
	if err != nil {
		return "", fmt.Errorf("the end_session_endpoint %q is not a URL: %w", endSession, err)
	}
	au, err := url.Parse(authURL)
	if err != nil {
		return "", fmt.Errorf("the authorization URL is not a URL: %w", err)
	}
	q := es.Query()
	for k, vs := range au.Query() {
		q[k] = vs
	}
	es.RawQuery = q.Encode()
	return es.String(), nil
}

// callbackHandler takes the first redirect that carries a code or an
// error, checks its state, and hands it over; anything else (a favicon)
// is not found.
func callbackHandler(state string, results chan<- callback) http.Handler {
	var once sync.Once
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if r.URL.Path != "/" || (q.Get("code") == "" && q.Get("error") == "") {
			http.NotFound(w, r)
			return
		}
		var res callback
		switch {
		case q.Get("state") != state:
			res.err = errors.New("the sign-in answer's state does not match this sign-in (an answer to another sign-in, or forged): run devhook login again")
		case q.Get("error") != "":
			res.err = &ProviderError{Code: q.Get("error"), Description: q.Get("error_description"), URI: q.Get("error_uri")}
		default:
			res.code = q.Get("code")
		}
		sent := false
		once.Do(func() { results <- res; sent = true })
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		switch {
		case !sent:
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, page("This sign-in has already been answered.", "Close this window."))
		case res.err != nil:
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, page("Sign-in failed.", res.err.Error()))
		default:
			io.WriteString(w, page("Signed in.", "You can close this window and go back to the terminal."))
		}
	})
}

func page(title, text string) string {
	return "<!doctype html><meta charset=utf-8><title>devhook</title><h1>" + html.EscapeString(title) + "</h1><p>" + html.EscapeString(text) + "</p>\n"
}

// random returns n random bytes from Rand, base64url-encoded without
// padding (32 bytes make a 43-character PKCE verifier).
func (c *Client) random(n int) (string, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(c.cfg.Rand, b); err != nil {
		return "", fmt.Errorf("sign in: reading random bytes: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
