package inspector

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"net"
	"net/http"
	"strings"
)

// checkHost refuses requests whose Host header does not name this machine's
// loopback interface or an allowed host. A page on another site that
// rebinds its DNS name to 127.0.0.1 still sends its own name as Host.
func (s *Server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.hostAllowed(r.Host) {
			s.cfg.Logf("inspector: refused a request for host %q", r.Host)
			writeJSON(w, http.StatusForbidden, errorBody{
				Error: "host " + quoteHost(r.Host) + " is not a loopback name: open the inspector at http://127.0.0.1 or http://localhost",
			})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func quoteHost(h string) string {
	if len(h) > 100 {
		h = h[:100]
	}
	return "\"" + strings.ToValidUTF8(h, "?") + "\""
}

func (s *Server) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" {
		return false
	}
	if IsLoopbackHost(host) {
		return true
	}
	for _, a := range s.cfg.AllowedHosts {
		if strings.EqualFold(strings.TrimSuffix(a, "."), host) {
			return true
		}
	}
	return false
}

// IsLoopbackHost reports whether host (without port or brackets) is
// "localhost", a name under ".localhost", or a loopback IP literal.
func IsLoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if i := strings.IndexByte(host, '%'); i >= 0 { // zone, as in ::1%lo
		host = host[:i]
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// contentSecurityPolicy allows the page's own scripts, styles and API and
// nothing else: no inline script, no frames, no foreign connections.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		next.ServeHTTP(w, r)
	})
}

// assets serves the single-page app. Unknown paths outside /api/ are 404s:
// the page routes with the URL fragment.
//
// Each file has an ETag, a hash of its bytes: the browser asks again on
// every load (no-cache) and gets 304 for a file it has, so loading the
// page's modules costs round trips, not their bytes.
func (s *Server) assets() http.Handler {
	files := http.FileServerFS(s.cfg.Assets)
	etags := assetETags(s.cfg.Assets)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		name := strings.TrimPrefix(r.URL.Path, "/")
		if name == "" {
			name = "index.html"
		}
		if etag, ok := etags[name]; ok {
			w.Header().Set("ETag", etag)
		}
		files.ServeHTTP(w, r)
	})
}

// assetETags is a strong ETag for every file of fsys, by path.
func assetETags(fsys fs.FS) map[string]string {
	etags := map[string]string{}
	fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		b, err := fs.ReadFile(fsys, path)
		if err != nil {
			return nil
		}
		sum := sha256.Sum256(b)
		etags[path] = `"` + hex.EncodeToString(sum[:12]) + `"`
		return nil
	})
	return etags
}
