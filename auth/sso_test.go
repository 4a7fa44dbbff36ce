package auth_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/devhook/devhook/auth"
	"github.com/devhook/devhook/emulator"
)

func TestCheckSSO(t *testing.T) {
	v := newIdP(t, emulator.Config{})
	hc := v.srv.Client()
	for _, tc := range []struct {
		name, endpoint, domain string
		want                   auth.SSO
		wantErr                string
	}{
		{"enabled", v.srv.URL, "corp.test", auth.SSO{Domain: "corp.test", Enabled: true, Identifier: "corp-idp"}, ""},
		{"case", v.srv.URL, "CORP.test", auth.SSO{Domain: "corp.test", Enabled: true, Identifier: "corp-idp"}, ""},
		{"not enabled", v.srv.URL, "example.com", auth.SSO{Domain: "example.com"}, ""},
		{"bare host", strings.TrimPrefix(v.srv.URL, "https://"), "corp.test", auth.SSO{Domain: "corp.test", Enabled: true, Identifier: "corp-idp"}, ""},
		{"http refused", "http://" + strings.TrimPrefix(v.srv.URL, "https://"), "corp.test", auth.SSO{}, "https"},
		{"not a domain", v.srv.URL, "you@corp.test", auth.SSO{}, "not an e-mail domain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := auth.CheckSSO(ctx(t), hc, tc.endpoint, tc.domain)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("CheckSSO = %+v, %v; want an error saying %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("CheckSSO = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
	// Any non-2xx answer is an HTTP error: 404 is not "no single
	// sign-on" (that is 200 without domain_identifier).
	for _, status := range []int{http.StatusNotFound, http.StatusBadGateway, http.StatusUnauthorized} {
		srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, http.StatusText(status), status)
		}))
		got, err := auth.CheckSSO(ctx(t), srv.Client(), srv.URL, "corp.test")
		srv.Close()
		var he *auth.HTTPError
		if !errors.As(err, &he) || he.Status != status {
			t.Errorf("CheckSSO with a %d = %+v, %v; want an *HTTPError", status, got, err)
		}
	}
	// 200 with {} is a domain without single sign-on.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte("{}"))
	}))
	defer srv.Close()
	got, err := auth.CheckSSO(ctx(t), srv.Client(), srv.URL, "corp.test")
	if err != nil || got != (auth.SSO{Domain: "corp.test"}) {
		t.Errorf("CheckSSO of {} = %+v, %v; want not enabled", got, err)
	}
}
