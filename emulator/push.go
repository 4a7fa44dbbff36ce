package emulator

import (
	"context"
	mathrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// Pushing an application, as the service's own clients do it
// (docs/INTERFACE.md, "Pushing an application"):
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
//
// A package PUT and never activated is kept until UploadTTL after its
// upload URL expired (an hour after, by default), then removed, unless an
// instance or a run uses the same bytes; one left by an earlier emulator
// past that time goes at start. All packages together are bounded
// (packages.go): an activation of a package that had to make room for
// newer ones is 400, saying to upload it again.

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
	pending := *info
	pending.ActivateBy = u.ExpiresAt.Add(e.cfg.UploadTTL)
	a.Package = &pending
	if err := e.persist(op{bucketApps, k, &a}, op{bucketPackageUploads, th, nil}); err != nil {
		return err
	}
	e.st.apps[k] = &a
	delete(e.st.pkgUploads, th)
	select {
	case e.pkgWake <- struct{}{}: // its expiry may be the sweep's next
	default:
	}
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
		return errorf(http.StatusBadRequest, "application %q has no package to activate: PUT one to the upload_url of GET /v1/applications/%s/binary first "+
			"(a package not activated within %s after its upload URL expired is removed)",
			old.ID, url.PathEscape(old.ID), e.cfg.UploadTTL)
	}
	if !e.pkgs.has(old.Package.Digest) {
		return errorf(http.StatusBadRequest, "the package uploaded for application %q is no longer kept: it made room for newer uploads "+
			"(devhook emulate --max-pushed); upload it again to the upload_url of GET /v1/applications/%s/binary", old.ID, url.PathEscape(old.ID))
	}
	if !old.Package.has(exe) {
		return errorf(http.StatusBadRequest, "the package lacks %s, the executable of a %s application; it has %s",
			exe, typ, strings.Join(old.Package.Executables, ", "))
	}
	a := *old
	a.Binary = &binary{packageInfo: *old.Package, Type: typ, Runtime: in.Requirements.Runtime, PushedAt: now}
	a.Binary.ActivateBy = time.Time{}
	a.UpdatedAt = now
	if err := e.persist(op{bucketApps, acctKey(a.Account, a.ID), &a}); err != nil {
		return err
	}
	e.st.apps[acctKey(a.Account, a.ID)] = &a
	e.pkgs.touch(a.Binary.Digest)
	writeJSON(w, http.StatusOK, e.pushObject(r, a.ID))
	return nil
}

// pending says whether the application's newest package waits for an
// activation: it is not the one active on latest.
func (a *application) pending() bool {
	return a.Package != nil && (a.Binary == nil || a.Binary.Digest != a.Package.Digest)
}

// pinnedPackages returns the digests of the packages in use: active on an
// application's instance, or the package of a queued or running run. It
// holds e.mu until release is called, so that none becomes used meanwhile.
func (e *Emulator) pinnedPackages() (map[string]bool, func()) {
	e.mu.Lock()
	pinned := map[string]bool{}
	for _, a := range e.st.apps {
		if a.Binary != nil {
			pinned[a.Binary.Digest] = true
		}
	}
	for _, rn := range e.st.runs {
		if rn.Binary != nil && !final(rn.Status) {
			pinned[rn.Binary.Digest] = true
		}
	}
	return pinned, e.mu.Unlock
}

// Bounds of the sweep's waits.
const (
	sweepMaxWait    = time.Hour       // between sweeps with nothing to expire
	sweepRetryFirst = time.Second     // after a sweep that failed, doubling
	sweepRetryMax   = 5 * time.Minute // to this
)

// startPackageSweep removes at once the packages never activated whose
// time has passed (leftovers of an earlier emulator among them), makes the
// kept packages fit the bound, and then sweeps again at each next expiry.
func (e *Emulator) startPackageSweep() {
	next, err := e.expirePending()
	if err != nil {
		e.cfg.Logf("emulator: removing packages never activated: %v; trying again in %s", err, sweepRetryFirst)
	}
	if err := e.pkgs.reserve("the packages kept").add(0); err != nil {
		e.cfg.Logf("emulator: the packages in use take more than --max-pushed (%d bytes): uploads are refused until some are unused", e.cfg.MaxPushedBytes)
	}
	e.goroutine(func(ctx context.Context) {
		failures := 0
		retry := sweepRetryFirst
		for {
			wait := sweepMaxWait
			if !next.IsZero() {
				wait = min(wait, max(next.Sub(e.now()), 0))
			}
			if failures > 0 {
				wait = min(wait, jitter(retry))
				retry = min(2*retry, sweepRetryMax)
			}
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-e.pkgWake:
				t.Stop()
			case <-t.C:
			}
			next, err = e.expirePending()
			switch {
			case err != nil:
				failures++
				if failures == 1 {
					e.cfg.Logf("emulator: removing packages never activated: %v; trying again with backoff", err)
				}
			case failures > 0:
				e.cfg.Logf("emulator: removed the packages never activated after %d failed tries", failures)
				failures, retry = 0, sweepRetryFirst
			}
		}
	})
}

// jitter is d give or take a fifth, so that retries do not march in step.
func jitter(d time.Duration) time.Duration {
	return d - d/5 + time.Duration(mathrand.Int64N(int64(2*d/5)+1))
}

// expirePending removes the packages never activated whose time has
// passed (an application's pending package with no time, left by an
// earlier version, too), and returns when the next one's comes.
func (e *Emulator) expirePending() (next time.Time, err error) {
	now := e.now()
	e.mu.Lock()
	var ops []op
	var apps []*application
	for k, a := range e.st.apps {
		if !a.pending() {
			continue
		}
		if by := a.Package.ActivateBy; !by.IsZero() && now.Before(by) {
			if next.IsZero() || by.Before(next) {
				next = by
			}
			continue
		}
		c := *a
		c.Package = nil
		if a.Binary != nil {
			p := a.Binary.packageInfo
			c.Package = &p // what an activation takes again is the active one
		}
		ops = append(ops, op{bucketApps, k, &c})
		apps = append(apps, &c)
	}
	if len(ops) == 0 {
		e.mu.Unlock()
		return next, nil
	}
	if err := e.persist(ops...); err != nil {
		e.mu.Unlock()
		return now, err
	}
	gone := map[string]bool{}
	for i, a := range apps {
		gone[e.st.apps[ops[i].key].Package.Digest] = true
		e.st.apps[ops[i].key] = a
	}
	// Bytes another application still waits to activate, or that are in
	// use, stay.
	for _, a := range e.st.apps {
		if a.Package != nil {
			delete(gone, a.Package.Digest)
		}
		if a.Binary != nil {
			delete(gone, a.Binary.Digest)
		}
	}
	for _, rn := range e.st.runs {
		if rn.Binary != nil && !final(rn.Status) {
			delete(gone, rn.Binary.Digest)
		}
	}
	var trash []string
	for d := range gone {
		if dir, ok := e.pkgs.evictOne(d); ok {
			trash = append(trash, dir)
		}
	}
	e.mu.Unlock()
	for _, dir := range trash {
		os.RemoveAll(dir)
	}
	return next, nil
}
