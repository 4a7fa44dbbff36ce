package emulator

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"sort"
	"strings"
)

// call is what a handler gets besides the request: the path's wildcards and
// who is calling for which account.
type call struct {
	args    map[string]string
	account string // the account the call acts for
	email   string // the caller's e-mail
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, c *call) error

type route struct {
	segs    []string // literal segments, or {name} for one non-empty segment
	public  bool     // no credential needed
	methods map[string]handlerFunc
}

// Identity provider paths.
const (
	pathDiscovery  = "/.well-known/openid-configuration"
	pathAuthorize  = "/oauth2/authorize"
	pathToken      = "/oauth2/token"
	pathEndSession = "/logout"
)

func (e *Emulator) routes() http.Handler {
	rs := []route{
		{segs: split("/v1/webhooks"), methods: map[string]handlerFunc{"GET": e.listWebhooks, "POST": e.createWebhook}},
		{segs: split("/v1/webhooks/{webhook_id}"), methods: map[string]handlerFunc{
			"GET": e.getWebhook, "PUT": e.updateWebhook, "DELETE": e.deleteWebhook}},
		{segs: split("/v1/webhooks/{webhook_id}/secret"), methods: map[string]handlerFunc{"GET": e.getSecret}},
		{segs: split("/v1/webhooks/{webhook_id}/conversations"), methods: map[string]handlerFunc{"GET": e.listConversations}},
		{segs: split("/v1/webhooks/{webhook_id}/conversations/{conversation_id}"), methods: map[string]handlerFunc{"GET": e.getConversation}},
		{segs: split("/v1/events/trigger"), methods: map[string]handlerFunc{"POST": e.trigger}},
		{segs: split("/v1/applications"), methods: map[string]handlerFunc{"POST": e.createApplication}},
		{segs: split("/v1/applications/{application_id}"), methods: map[string]handlerFunc{"GET": e.getApplication}},
		{segs: split("/v1/applications/{application_id}/binary"), methods: map[string]handlerFunc{"GET": e.binaryUploadURL, "PUT": e.activateBinary}},
		{segs: split("/v1/applications/{application_id}/runs"), methods: map[string]handlerFunc{"GET": e.listRuns, "POST": e.startRun}},
		// uploadurl before {run_id}, which would take it for a run id.
		{segs: split("/v1/applications/{application_id}/runs/uploadurl"), methods: map[string]handlerFunc{"POST": e.createUploadURL}},
		{segs: split("/v1/applications/{application_id}/runs/{run_id}"), methods: map[string]handlerFunc{"GET": e.getRun}},
		{segs: split("/v1/applications/{application_id}/runs/{run_id}/metadata"), methods: map[string]handlerFunc{"GET": e.getRunMetadata}},
		{segs: split("/v1/applications/{application_id}/runs/{run_id}/input"), methods: map[string]handlerFunc{"GET": e.getRunInput}},
		{segs: split("/v1/applications/{application_id}/runs/{run_id}/logs"), methods: map[string]handlerFunc{"GET": e.getRunLogs}},
		{segs: split("/v1/applications/{application_id}/runs/{run_id}/cancel"), methods: map[string]handlerFunc{"PATCH": e.cancelRun}},
		{segs: split(pathUploads + "/{token}"), public: true, methods: map[string]handlerFunc{"PUT": e.putUpload}},
		{segs: split(pathPackages + "/{token}"), public: true, methods: map[string]handlerFunc{"PUT": e.putPackage}},
		{segs: split(pathDownloads + "/{token}"), public: true, methods: map[string]handlerFunc{"GET": e.getDownload}},
		{segs: split(pathConsole), public: true, methods: map[string]handlerFunc{"GET": e.consoleRun}},
		{segs: split("/v1/internal/me/organization"), methods: map[string]handlerFunc{"GET": e.organizations}},
		{segs: split("/v1/enterprise/sso/domain"), public: true, methods: map[string]handlerFunc{"GET": e.ssoDomain}},
		{segs: split(pathDiscovery), public: true, methods: map[string]handlerFunc{"GET": e.discovery}},
		{segs: split(pathAuthorize), public: true, methods: map[string]handlerFunc{"GET": e.authorize}},
		{segs: split(pathToken), public: true, methods: map[string]handlerFunc{"POST": e.tokenEndpoint}},
		{segs: split(pathEndSession), public: true, methods: map[string]handlerFunc{"GET": e.endSession}},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		segs, ok := pathSegments(r.URL)
		if !ok {
			writeError(w, errorf(http.StatusBadRequest, "the path is not validly escaped"))
			return
		}
		for _, rt := range rs {
			args, ok := match(rt.segs, segs)
			if !ok {
				continue
			}
			h := rt.methods[r.Method]
			if h == nil {
				allow := make([]string, 0, len(rt.methods))
				for m := range rt.methods {
					allow = append(allow, m)
				}
				sort.Strings(allow)
				w.Header().Set("Allow", strings.Join(allow, ", "))
				writeError(w, errorf(http.StatusMethodNotAllowed, "method %s is not allowed here; use %s", r.Method, strings.Join(allow, " or ")))
				return
			}
			c := &call{args: args}
			if !rt.public {
				if err := e.authenticate(r, c); err != nil {
					writeError(w, err)
					return
				}
			}
			if err := h(w, r, c); err != nil {
				writeError(w, err)
			}
			return
		}
		writeError(w, errorf(http.StatusNotFound, "no such endpoint: %s", r.URL.Path))
	})
}

func split(p string) []string { return strings.Split(strings.TrimPrefix(p, "/"), "/") }

// pathSegments splits the escaped path and unescapes each segment, so that
// an id with an escaped slash stays one segment.
func pathSegments(u *url.URL) ([]string, bool) {
	raw := strings.Split(strings.TrimPrefix(u.EscapedPath(), "/"), "/")
	segs := make([]string, len(raw))
	for i, s := range raw {
		v, err := url.PathUnescape(s)
		if err != nil {
			return nil, false
		}
		segs[i] = v
	}
	return segs, true
}

func match(pattern, segs []string) (map[string]string, bool) {
	if len(pattern) != len(segs) {
		return nil, false
	}
	args := map[string]string{}
	for i, p := range pattern {
		if strings.HasPrefix(p, "{") {
			if segs[i] == "" {
				return nil, false
			}
			args[strings.Trim(p, "{}")] = segs[i]
			continue
		}
		if p != segs[i] {
			return nil, false
		}
	}
	return args, true
}

// authenticate resolves the bearer credential (an API key, or an access or
// id token of the identity provider) and the service-account header.
func (e *Emulator) authenticate(r *http.Request, c *call) error {
	h := r.Header.Get("Authorization")
	if h == "" {
		return errorf(http.StatusUnauthorized, "missing credential: send Authorization: Bearer <API key>")
	}
	scheme, cred, ok := strings.Cut(h, " ")
	cred = strings.TrimSpace(cred)
	if !ok || !strings.EqualFold(scheme, "Bearer") || cred == "" {
		return errorf(http.StatusUnauthorized, "the Authorization header must be Bearer <API key>")
	}
	if acct, ok := e.keys[cred]; ok {
		c.account, c.email = acct, e.cfg.UserEmail
	} else {
		e.mu.Lock()
		t := e.st.tokens[tokenKey(cred)]
		e.mu.Unlock()
		if t == nil || (t.Kind != "access" && t.Kind != "id") {
			return errorf(http.StatusUnauthorized, "unknown API key or token")
		}
		if !e.now().Before(t.ExpiresAt) {
			return errorf(http.StatusUnauthorized, "the token has expired; refresh it or sign in again")
		}
		c.account, c.email = "user-"+t.Subject, t.Email
	}
	if team := r.Header.Get("service-account"); team != "" {
		if !e.teams[team] {
			return errorf(http.StatusUnauthorized, "unknown team %q in the service-account header; list your teams with GET /v1/internal/me/organization", team)
		}
		c.account = "team-" + team
	}
	return nil
}

func tokenKey(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}
