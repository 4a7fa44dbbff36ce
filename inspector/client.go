package inspector

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/storage"
)

// Client talks to a running inspector's JSON API, so that command-line
// tools see what a running `devhook listen` sees without opening its
// (locked) store.
type Client struct {
	BaseURL string       // such as http://127.0.0.1:4040
	HTTP    *http.Client // must have a timeout
}

// List returns deliveries, newest first.
func (c *Client) List(ctx context.Context, f devhook.Filter) ([]devhook.Summary, error) {
	p, err := c.ListPage(ctx, f)
	return p.Items, err
}

// ListPage returns a page of deliveries, newest first, with what the
// store skipped.
func (c *Client) ListPage(ctx context.Context, f devhook.Filter) (ListPage, error) {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit > 0 {
		set("limit", strconv.Itoa(f.Limit))
	}
	if f.Status != 0 {
		set("status", strconv.Itoa(f.Status))
	}
	set("before", f.Before)
	set("verdict", f.Verdict)
	set("run_id", f.RunID)
	set("status_v2", f.StatusV2)
	set("q", f.Text)
	var out ListPage
	err := c.do(ctx, http.MethodGet, "/api/deliveries?"+q.Encode(), nil, &out)
	return out, err
}

// Delivery returns one delivery with its attempts. One some parts of
// which the store could not read comes with a *devhook.PartialError, the
// parts marked in it, as storage.DB.Delivery gives it.
func (c *Client) Delivery(ctx context.Context, id string) (*devhook.Delivery, error) {
	var d devhook.Delivery
	if err := c.do(ctx, http.MethodGet, "/api/deliveries/"+url.PathEscape(id), nil, &d); err != nil {
		return nil, err
	}
	if lossy(&d) { // bytes JSON cannot hold (request.go)
		if err := c.restoreRequest(ctx, &d); err != nil {
			return nil, err
		}
	}
	// Parts the store could not read: the delivery with the error that
	// says so, as storage.DB.Delivery gives them.
	return &d, d.Unreadable()
}

// Settings returns the running listen's settings, its data directory
// among them.
func (c *Client) Settings(ctx context.Context) (SettingsView, error) {
	var v SettingsView
	err := c.do(ctx, http.MethodGet, "/api/settings", nil, &v)
	return v, err
}

// Replay asks the running agent to send delivery id again.
func (c *Client) Replay(ctx context.Context, id string, opt devhook.ReplayOptions) (devhook.Attempt, error) {
	body := map[string]any{}
	if opt.Resign != nil {
		body["resign"] = *opt.Resign
	}
	if opt.To != "" {
		body["to"] = opt.To
	}
	if opt.Header != nil {
		body["header"] = opt.Header
	}
	if len(opt.SetHeader) > 0 {
		body["set_header"] = opt.SetHeader
	}
	if len(opt.RemoveHeader) > 0 {
		body["remove_header"] = opt.RemoveHeader
	}
	if opt.HasBody {
		// A string, "" for an empty body: a nil []byte would be null,
		// which the API reads as no body given.
		body["body_base64"] = base64.StdEncoding.EncodeToString(opt.Body)
	}
	var a devhook.Attempt
	err := c.do(ctx, http.MethodPost, "/api/deliveries/"+url.PathEscape(id)+"/replay", body, &a)
	return a, err
}

// Delete deletes the deliveries refs, each a whole id or the start of one
// that only it has: all of them, or, when one is missing or ambiguous,
// none (an error that names each).
func (c *Client) Delete(ctx context.Context, refs []string) (DeleteResult, error) {
	var out DeleteResult
	if len(refs) == 0 {
		return out, devhook.Errorf(devhook.EINVALID, "no delivery id given")
	}
	q := url.Values{"id": refs}
	err := c.do(ctx, http.MethodDelete, "/api/deliveries?"+q.Encode(), nil, &out)
	return out, err
}

// DeleteMatching deletes the deliveries sel chooses; the zero Selection
// chooses all of them.
func (c *Client) DeleteMatching(ctx context.Context, sel storage.Selection) (DeleteResult, error) {
	var out DeleteResult
	path := "/api/deliveries"
	if q := SelectionQuery(sel); len(q) > 0 {
		path += "?" + q.Encode()
	}
	err := c.do(ctx, http.MethodDelete, path, nil, &out)
	return out, err
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var rd io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("inspector at %s: %w", c.BaseURL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("inspector at %s: %w", c.BaseURL, err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(b, &e)
		if e.Error == "" {
			e.Error = strings.TrimSpace(string(b))
		}
		code := devhook.EINTERNAL
		switch resp.StatusCode {
		case http.StatusNotFound:
			code = devhook.ENOTFOUND
		case http.StatusBadRequest:
			code = devhook.EINVALID
		case http.StatusConflict:
			code = devhook.ECONFLICT
		}
		return devhook.Errorf(code, "%s", e.Error)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("inspector at %s: unexpected answer: %w", c.BaseURL, err)
	}
	return nil
}
