package cloud

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// Pushing, as docs/INTERFACE.md describes it: GET …/binary for an upload URL,
// PUT the package there (no credential: the URL is one), then PUT
// …/binary with the requirements, which assigns it to the instance latest.

// PushResult is the push object of the interface.
type PushResult struct {
	AppID       string `json:"app_id"`
	Endpoint    string `json:"endpoint"`     // the API's host name
	InstanceURL string `json:"instance_url"` // the runs path of the instance latest
}

// Requirements are what the activation sends.
type Requirements struct {
	ExecutableType string `json:"executable_type"`
	Runtime        string `json:"runtime"`
}

// BinaryUpload is the answer of GET …/binary.
type BinaryUpload struct {
	UploadURL string `json:"upload_url"`
}

// BinaryUploadURL asks for the URL to PUT an application's package to.
func (c *Client) BinaryUploadURL(ctx context.Context, app string) (string, error) {
	var a BinaryUpload
	raw, err := c.call(ctx, http.MethodGet, path("v1", "applications", app, "binary"), nil, nil, &a)
	if err != nil {
		return "", err
	}
	u, perr := url.Parse(a.UploadURL)
	if perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("GET /v1/applications/%s/binary: the answer has no absolute upload_url: %s", app, raw)
	}
	return a.UploadURL, nil
}

// UploadPackage PUTs size bytes of body to an upload URL, with no
// credential.
func (c *Client) UploadPackage(ctx context.Context, uploadURL string, body io.Reader, size int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, uploadURL, body)
	if err != nil {
		return fmt.Errorf("upload the package: %w", err)
	}
	req.ContentLength = size
	req.Header.Set("Content-Type", "application/gzip")
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	resp, err := c.http.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("upload the package to %s: %w", redactURL(uploadURL), err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if resp.StatusCode/100 != 2 {
		ae := c.apiError(http.MethodPut, redactURL(uploadURL), resp.StatusCode, b)
		if resp.StatusCode == http.StatusNotFound {
			ae.Hint = "the upload URL is used up or expired: push again"
		}
		return ae
	}
	return nil
}

// redactURL leaves the query and the last path segment (the upload's
// credential) out of an upload URL.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "the upload URL"
	}
	p := u.Path
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		p = p[:i+1] + "…"
	}
	return u.Scheme + "://" + u.Host + p
}

// ActivateBinary assigns the application's uploaded package to the
// instance latest.
func (c *Client) ActivateBinary(ctx context.Context, app string, r Requirements) error {
	_, err := c.call(ctx, http.MethodPut, path("v1", "applications", app, "binary"), nil,
		map[string]Requirements{"requirements": r}, nil)
	return err
}

// Push uploads a built package of the manifest's application to app and
// activates it; it returns the push object.
func (c *Client) Push(ctx context.Context, app string, m *Manifest, pkg *Package) (PushResult, error) {
	u, err := c.BinaryUploadURL(ctx, app)
	if err != nil {
		return PushResult{}, fmt.Errorf("push %s: %w", app, err)
	}
	f, err := os.Open(pkg.Path)
	if err != nil {
		return PushResult{}, fmt.Errorf("push %s: %w", app, err)
	}
	defer f.Close()
	if err := c.UploadPackage(ctx, u, f, pkg.Size); err != nil {
		return PushResult{}, fmt.Errorf("push %s: %w", app, err)
	}
	if err := c.ActivateBinary(ctx, app, Requirements{ExecutableType: m.Type, Runtime: m.Runtime}); err != nil {
		return PushResult{}, fmt.Errorf("push %s: activate the package on instance latest: %w", app, err)
	}
	return PushResult{
		AppID:       app,
		Endpoint:    c.base.Host,
		InstanceURL: c.base.String() + path("v1", "applications", app, "runs") + "?instance_id=latest",
	}, nil
}
