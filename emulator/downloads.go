package emulator

import (
	"bytes"
	"encoding/json"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Large outputs and inputs go the way the service's own clients read them
// (their limit for inline bodies is 5 MiB): GET …/runs/{id}?format=url
// answers the run record with output {"url": <download URL>}, and GET
// …/runs/{id}/input?format=url answers {"url": <download URL>}; a GET of
// the URL, with no credential (the URL is the credential, as a presigned
// storage URL is), answers the output or the input. Without format, both
// answer inline, whatever the size. A download URL is good for any number
// of GETs within UploadTTL; only its token's hash is kept, with a data
// directory across restarts, as upload URLs are.

// pathDownloads is where download URLs point, outside /v1 as a storage
// URL is outside the API.
const pathDownloads = "/downloads"

// download is a download URL: what it serves, until when.
type download struct {
	Account   string    `json:"account"`
	RunKey    string    `json:"run_key"`
	What      string    `json:"what"` // "output" or "input"
	ExpiresAt time.Time `json:"expires_at"`
}

// format reads the query's format: "" (inline) or "url"; 400 otherwise.
func format(r *http.Request) (string, error) {
	switch f := r.URL.Query().Get("format"); f {
	case "", "url":
		return f, nil
	default:
		return "", errorf(http.StatusBadRequest, "format %q: leave it out for the content inline, or format=url for a URL to download it from", f)
	}
}

// downloadURL makes a download URL of the run at key's output or input.
// The caller holds e.mu.
func (e *Emulator) downloadURL(r *http.Request, account, key, what string) (string, error) {
	token, err := e.random("", 32)
	if err != nil {
		return "", err
	}
	now := e.now()
	d := &download{Account: account, RunKey: key, What: what, ExpiresAt: now.Add(e.cfg.UploadTTL)}
	th := tokenKey(token)
	ops := []op{{bucketDownloads, th, d}}
	for k, old := range e.st.downloads {
		if !now.Before(old.ExpiresAt) {
			ops = append(ops, op{bucketDownloads, k, nil})
		}
	}
	if err := e.persist(ops...); err != nil {
		return "", err
	}
	for _, o := range ops[1:] {
		delete(e.st.downloads, o.key)
	}
	e.st.downloads[th] = d
	return e.baseURL(r) + pathDownloads + "/" + url.PathEscape(token), nil
}

var errUnknownDownloadURL = errorf(http.StatusNotFound,
	"no download at this URL: it is unknown or expired; ask for a new one with GET /v1/applications/{application_id}/runs/{run_id}?format=url (or …/input?format=url)")

// getDownload serves a download URL: the run's output (JSON), or its input
// as it came (JSON, or an uploaded text input as its text).
func (e *Emulator) getDownload(w http.ResponseWriter, r *http.Request, c *call) error {
	e.mu.Lock()
	d := e.st.downloads[tokenKey(c.args["token"])]
	var rn *run
	if d != nil && e.now().Before(d.ExpiresAt) {
		rn = e.st.runs[d.RunKey]
	}
	e.mu.Unlock()
	if rn == nil {
		return errUnknownDownloadURL
	}
	if d.What == "input" {
		writeInput(w, rn)
		return nil
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(rn.output())
	return nil
}

// writeInput answers a run's input: the JSON as sent, or the text as
// uploaded.
func writeInput(w http.ResponseWriter, rn *run) {
	if rn.Text {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write(stdinOf(rn))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(rn.Input)
}

// getRunInput answers the run's input, or with format=url {"url"}.
func (e *Emulator) getRunInput(w http.ResponseWriter, r *http.Request, c *call) error {
	f, err := format(r)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	k, rn, err := e.lookupRun(c)
	if err != nil {
		return err
	}
	if f == "url" {
		u, err := e.downloadURL(r, c.account, k, "input")
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]string{"url": u})
		return nil
	}
	writeInput(w, rn)
	return nil
}

// pathConsole is a run's console_url.
const pathConsole = "/console/applications/{application_id}/runs/{run_id}"

// consolePage is the page at a run's console_url: its record, readable.
var consolePage = template.Must(template.New("run").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Run {{.ID}}</title>
<style>body{font-family:system-ui,sans-serif;margin:2em}pre{background:#f4f4f4;padding:1em;overflow:auto}</style></head>
<body><h1>Run {{.ID}}</h1>
<p>Application {{.App}}, instance {{.Instance}}: <strong>{{.Status}}</strong>{{if .Error}}: {{.Error}}{{end}}</p>
<h2>Record</h2><pre>{{.Record}}</pre>
{{if .Output}}<h2>Output</h2><pre>{{.Output}}</pre>{{if .Clipped}}<p>The output's first {{.Shown}} of {{.Size}} bytes; all of it: GET the run record.</p>{{end}}{{end}}
<p>Served by devhook's emulator of the service.</p></body></html>
`))

// consoleOutputBytes is how much of a run's output its console page shows.
const consoleOutputBytes = 64 << 10

// consoleRun serves a run's console_url: a page with its record. It needs
// no credential, as a browser opens it: the run's random id is its key.
func (e *Emulator) consoleRun(w http.ResponseWriter, r *http.Request, c *call) error {
	app, id := c.args["application_id"], c.args["run_id"]
	e.mu.Lock()
	var rn *run
	for _, x := range e.st.runs {
		if x.ID == id && x.AppID == app {
			rn = x
			break
		}
	}
	var rec []byte
	if rn != nil {
		rec, _ = json.MarshalIndent(rn.record(false), "", "  ")
	}
	var out []byte
	if rn != nil {
		out = rn.output()
	}
	e.mu.Unlock()
	if rn == nil {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte("application " + app + " has no run " + id + "\n"))
		return nil
	}
	shown := out
	if len(shown) > consoleOutputBytes {
		shown = shown[:consoleOutputBytes]
	} else if len(out) > 0 {
		var pretty bytes.Buffer
		if json.Indent(&pretty, out, "", "  ") == nil {
			shown = pretty.Bytes()
		}
	}
	var b bytes.Buffer
	err := consolePage.Execute(&b, map[string]any{
		"ID": rn.ID, "App": rn.AppID, "Instance": rn.InstanceID, "Status": rn.Status, "Error": rn.errorText(),
		"Record": string(rec), "Output": strings.ToValidUTF8(string(shown), "\uFFFD"),
		"Clipped": len(out) > consoleOutputBytes, "Shown": consoleOutputBytes, "Size": len(out),
	})
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Write(b.Bytes())
	return nil
}
