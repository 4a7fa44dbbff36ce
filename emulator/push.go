package emulator

import (
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Pushing an application, as the service's own clients do it
// (DECISIONS.md, "Pushing an application"):
//
//	GET /v1/applications/{id}/binary            → 200 {"upload_url": <absolute URL>}
//	PUT <upload_url>  (the gzip'd tar)          → 200, empty; no credential
//	PUT /v1/applications/{id}/binary            → 200 the push object
//	    {"requirements": {"executable_type": "python"|"go"|"java", "runtime": "<image>"}}
//
// The upload URL is /packages/{token}, outside /v1 as a storage URL is:
// the token is its credential (only its hash is kept), good for UploadTTL
// and for one package. A package is checked and unpacked when it is PUT
// (packages.go): 413 over MaxPackageBytes, 400 when it is not a gzip'd
// tar of files or has no executable at all. The activation takes the
// application's newest package: 400 when none was PUT, when the
// requirements are missing or name another type, or when the package
// lacks that type's executable (main.py, main, main.jar). It assigns the
// package to the instance latest; runs of latest started after it
// execute it (exec.go). Unknown application: 404, at each step.

const pathPackages = "/packages"

// packageUpload is an upload URL of a package.
type packageUpload struct {
	Account   string    `json:"account"`
	AppID     string    `json:"application_id"`
	TokenHash string    `json:"token_hash"`
	ExpiresAt time.Time `json:"expires_at"`
}

// binary is the executable assigned to the instance latest.
type binary struct {
	packageInfo
	Type     string    `json:"executable_type"`
	Runtime  string    `json:"runtime"`
	PushedAt time.Time `json:"pushed_at"`
}

// pushObject is the interface's answer to a push: app_id, endpoint (the
// API's host name) and instance_url (the runs path of the instance).
func (e *Emulator) pushObject(r *http.Request, appID string) map[string]string {
	base := e.baseURL(r)
	host := strings.TrimPrefix(strings.TrimPrefix(base, "https://"), "http://")
	return map[string]string{
		"app_id":       appID,
		"endpoint":     host,
		"instance_url": base + "/v1/applications/" + url.PathEscape(appID) + "/runs?instance_id=" + defaultInstance,
	}
}

// binaryUploadURL answers 200 {"upload_url"}.
func (e *Emulator) binaryUploadURL(w http.ResponseWriter, r *http.Request, c *call) error {
	token, err := e.random("", 32)
	if err != nil {
		return err
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, err := e.lookupApplication(c); err != nil {
		return err
	}
	u := &packageUpload{Account: c.account, AppID: c.args["application_id"], TokenHash: tokenKey(token), ExpiresAt: now.Add(e.cfg.UploadTTL)}
	ops := []op{{bucketPackageUploads, u.TokenHash, u}}
	for th, old := range e.st.pkgUploads {
		if !now.Before(old.ExpiresAt) {
			ops = append(ops, op{bucketPackageUploads, th, nil})
		}
	}
	if err := e.persist(ops...); err != nil {
		return err
	}
	for _, o := range ops[1:] {
		delete(e.st.pkgUploads, o.key)
	}
	e.st.pkgUploads[u.TokenHash] = u
	writeJSON(w, http.StatusOK, map[string]string{"upload_url": e.baseURL(r) + pathPackages + "/" + url.PathEscape(token)})
	return nil
}

var errUnknownPackageURL = errorf(http.StatusNotFound,
	"no package upload at this URL: it is unknown, expired or already used; get a new one with GET /v1/applications/{application_id}/binary")

// putPackage takes the package PUT to an upload URL.
func (e *Emulator) putPackage(w http.ResponseWriter, r *http.Request, c *call) error {
	th := tokenKey(c.args["token"])
	e.mu.Lock()
	u := e.st.pkgUploads[th]
	e.mu.Unlock()
	if u == nil || !e.now().Before(u.ExpiresAt) {
		return errUnknownPackageURL
	}
	info, err := e.pkgs.receive(http.MaxBytesReader(w, r.Body, e.cfg.MaxPackageBytes), e.cfg.MaxPackageBytes, e.cfg.MaxUnpackedBytes)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.st.pkgUploads[th] != u {
		return errUnknownPackageURL // another PUT came first
	}
	k := acctKey(u.Account, u.AppID)
	old := e.st.apps[k]
	if old == nil {
		return errorf(http.StatusNotFound, "no application with id %q any more", u.AppID)
	}
	a := *old
	a.Package = info
	if err := e.persist(op{bucketApps, k, &a}, op{bucketPackageUploads, th, nil}); err != nil {
		return err
	}
	e.st.apps[k] = &a
	delete(e.st.pkgUploads, th)
	w.WriteHeader(http.StatusOK)
	return nil
}

// activateBinary assigns the application's newest package to latest.
func (e *Emulator) activateBinary(w http.ResponseWriter, r *http.Request, c *call) error {
	e.mu.Lock()
	_, err := e.lookupApplication(c)
	e.mu.Unlock()
	if err != nil {
		return err
	}
	var in struct {
		Requirements *struct {
			ExecutableType string `json:"executable_type"`
			Runtime        string `json:"runtime"`
		} `json:"requirements"`
	}
	if err := e.decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Requirements == nil {
		return errorf(http.StatusBadRequest, `missing field: requirements; send {"requirements": {"executable_type": "python"|"go"|"java", "runtime": "<image>"}}`)
	}
	typ := in.Requirements.ExecutableType
	exe, ok := executable(typ)
	if !ok {
		return errorf(http.StatusBadRequest, "requirements.executable_type %q is not one of python, go and java", typ)
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	old, err := e.lookupApplication(c)
	if err != nil {
		return err
	}
	if old.Package == nil {
		return errorf(http.StatusBadRequest, "application %q has no package to activate: PUT one to the upload_url of GET /v1/applications/%s/binary first",
			old.ID, url.PathEscape(old.ID))
	}
	if !old.Package.has(exe) {
		return errorf(http.StatusBadRequest, "the package lacks %s, the executable of a %s application; it has %s",
			exe, typ, strings.Join(old.Package.Executables, ", "))
	}
	a := *old
	a.Binary = &binary{packageInfo: *old.Package, Type: typ, Runtime: in.Requirements.Runtime, PushedAt: now}
	a.UpdatedAt = now
	if err := e.persist(op{bucketApps, acctKey(a.Account, a.ID), &a}); err != nil {
		return err
	}
	e.st.apps[acctKey(a.Account, a.ID)] = &a
	writeJSON(w, http.StatusOK, e.pushObject(r, a.ID))
	return nil
}
