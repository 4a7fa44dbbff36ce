package cloud_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/auth"
	"github.com/devhook/devhook/cloud"
	"github.com/devhook/devhook/emulator"
)

// field is one row of a record's table in docs/INTERFACE.md.
type field struct {
	path string // dotted, [] for the elements of an array
	typ  string // string, integer, number, boolean, object, array; "X or null"
}

// interfaceRecords parses the record tables of docs/INTERFACE.md: each
// "### Name" under "## Records" and the rows of its table.
func interfaceRecords(t *testing.T) map[string][]field {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "docs", "INTERFACE.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	records := map[string][]field{}
	in, name := false, ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			in = line == "## Records"
			name = ""
		case in && strings.HasPrefix(line, "### "):
			name = strings.TrimPrefix(line, "### ")
			records[name] = nil
		case in && name != "" && strings.HasPrefix(line, "| `"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			if len(cells) < 2 {
				t.Fatalf("INTERFACE.md, %s: row %q has no type", name, line)
			}
			records[name] = append(records[name], field{
				path: strings.Trim(strings.TrimSpace(cells[0]), "`"),
				typ:  strings.TrimSpace(cells[1]),
			})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(records) == 0 {
		t.Fatal("INTERFACE.md has no record tables under ## Records")
	}
	for n, fs := range records {
		if len(fs) == 0 {
			t.Errorf("INTERFACE.md: record %q has no fields", n)
		}
	}
	return records
}

// lookup returns the values at path in v: one for a plain path, one per
// element below each [].
func lookup(v any, path string) (vals []any, missing string) {
	vals = []any{v}
	for _, seg := range strings.Split(path, ".") {
		each := strings.HasSuffix(seg, "[]")
		seg = strings.TrimSuffix(seg, "[]")
		var next []any
		for _, cur := range vals {
			m, ok := cur.(map[string]any)
			if !ok {
				return nil, seg + " (its parent is not an object)"
			}
			x, ok := m[seg]
			if !ok {
				return nil, seg
			}
			if each {
				arr, ok := x.([]any)
				if !ok {
					return nil, seg + " (not an array)"
				}
				if len(arr) == 0 {
					return nil, seg + " (an empty array: nothing to check its elements against)"
				}
				next = append(next, arr...)
				continue
			}
			next = append(next, x)
		}
		vals = next
	}
	return vals, ""
}

// jsonType says whether a decoded JSON value has the documented type.
func jsonType(v any, typ string) bool {
	base, nullable := strings.CutSuffix(typ, " or null")
	if v == nil {
		return nullable
	}
	switch base {
	case "string":
		_, ok := v.(string)
		return ok
	case "integer":
		n, ok := v.(float64)
		return ok && n == math.Trunc(n)
	case "number":
		_, ok := v.(float64)
		return ok
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	}
	return false
}

var (
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	numberType     = reflect.TypeFor[json.Number]()
)

// readsPath says whether the client's type decodes the field at path
// into a field of a matching kind: its JSON tags lead there.
func readsPath(tp reflect.Type, path, typ string) (ok bool, why string) {
	segs := strings.Split(path, ".")
	for i, seg := range segs {
		seg = strings.TrimSuffix(seg, "[]")
		for tp.Kind() == reflect.Pointer {
			tp = tp.Elem()
		}
		if tp == rawMessageType || tp.Kind() == reflect.Interface || tp.Kind() == reflect.Map {
			return true, "" // it keeps whatever is below
		}
		if tp.Kind() == reflect.Slice {
			tp = tp.Elem()
			for tp.Kind() == reflect.Pointer {
				tp = tp.Elem()
			}
		}
		if tp.Kind() != reflect.Struct {
			return false, strings.Join(segs[:i], ".") + " is read as " + tp.String()
		}
		sf, found := jsonField(tp, seg)
		if !found {
			return false, tp.String() + " has no field for " + seg
		}
		tp = sf.Type
		if strings.HasSuffix(segs[i], "[]") {
			if tp.Kind() != reflect.Slice {
				return false, seg + " is read as " + tp.String() + ", not a slice"
			}
		}
	}
	for tp.Kind() == reflect.Pointer {
		tp = tp.Elem()
	}
	base, _ := strings.CutSuffix(typ, " or null")
	k := tp.Kind()
	fits := tp == rawMessageType || k == reflect.Interface
	switch base {
	case "string":
		fits = fits || k == reflect.String
	case "integer", "number":
		fits = fits || tp == numberType || (k >= reflect.Int && k <= reflect.Float64)
	case "boolean":
		fits = fits || k == reflect.Bool
	case "object":
		fits = fits || k == reflect.Struct || k == reflect.Map
	case "array":
		fits = fits || k == reflect.Slice
	}
	if !fits {
		return false, path + " (" + typ + ") is read as " + tp.String()
	}
	return true, ""
}

// jsonField finds the struct field, embedded ones too, decoding key.
func jsonField(tp reflect.Type, key string) (reflect.StructField, bool) {
	for i := range tp.NumField() {
		sf := tp.Field(i)
		tag := sf.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		if sf.Anonymous && name == "" {
			if f, ok := jsonField(sf.Type, key); ok {
				return f, true
			}
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if strings.EqualFold(name, key) && sf.IsExported() {
			return sf, true
		}
	}
	return reflect.StructField{}, false
}

// TestInterfaceRecords walks every record table of docs/INTERFACE.md:
// the emulator's answer has every field with its type, and the client
// reads every one (its Go type has a field for it, or a functional check
// shows it is read). A table this test does not know fails it, so that
// the page and the test stay together.
func TestInterfaceRecords(t *testing.T) {
	records := interfaceRecords(t)
	ctx := context.Background()

	// An emulator, a receiver of its deliveries, and one of everything.
	e, err := emulator.New(emulator.Config{APIKeys: []string{key}, QueueTime: 10 * time.Millisecond, RunTime: 10 * time.Millisecond,
		RetryDelays: []time.Duration{}, Teams: []emulator.Team{testTeam}, SSODomains: map[string]string{"corp.test": "corp-idp"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewTLSServer(e)
	defer e.Close()
	defer srv.Close()
	bodies := make(chan []byte, 10)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies <- b
	}))
	defer recv.Close()
	c, err := cloud.New(cloud.Config{Endpoint: srv.URL, Credentials: cloud.APIKey(key), HTTPClient: srv.Client(), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	api := func(method, path, body string, want int) []byte {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, resp.StatusCode, b, want)
		}
		return b
	}

	type sample struct {
		raws   [][]byte     // the record as the emulator sent it, one or more times
		client reflect.Type // the client's type that reads it; nil with a check instead
		check  func(t *testing.T)
	}
	hook := `{"id":"hook","event_types":["run.status"],"endpoint_url":"` + recv.URL + `","description":"d"}`
	created := api("POST", "/v1/webhooks", hook, 201)
	updated := api("PUT", "/v1/webhooks/hook", hook, 200)
	api("POST", "/v1/applications", `{"id":"app","name":"App","description":""}`, 201)
	started := api("POST", "/v1/applications/app/runs?instance_id=latest", `{"input":{"x":1},"options":{"duration":"1s"}}`, 201)
	var start struct {
		ID string `json:"id"`
	}
	json.Unmarshal(started, &start)
	var events [][]byte
	for range 3 {
		select {
		case b := <-bodies:
			events = append(events, b)
		case <-time.After(10 * time.Second):
			t.Fatal("no delivery")
		}
	}
	var run []byte
	for deadline := time.Now().Add(10 * time.Second); ; {
		run = api("GET", "/v1/applications/app/runs/"+start.ID, "", 200)
		if bytes.Contains(run, []byte(`"status_v2":"succeeded"`)) || time.Now().After(deadline) {
			break
		}
	}
	var convs []byte
	for deadline := time.Now().Add(10 * time.Second); ; {
		convs = api("GET", "/v1/webhooks/hook/conversations", "", 200)
		if strings.Count(string(convs), `"webhook_id"`) >= 3 || time.Now().After(deadline) {
			break
		}
	}
	var cl struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	json.Unmarshal(convs, &cl)
	if len(cl.Items) == 0 {
		t.Fatalf("no conversations: %s", convs)
	}
	var items [][]byte
	var listed struct {
		Items []json.RawMessage `json:"items"`
	}
	json.Unmarshal(convs, &listed)
	for _, it := range listed.Items {
		items = append(items, it)
	}
	detail := api("GET", "/v1/webhooks/hook/conversations/"+cl.Items[0].ID, "", 200)
	binaryUpload := api("GET", "/v1/applications/app/binary", "", 200)
	var orgs []json.RawMessage
	json.Unmarshal(api("GET", "/v1/internal/me/organization", "", 200), &orgs)
	var orgRaws [][]byte
	for _, o := range orgs {
		orgRaws = append(orgRaws, o)
	}
	notFound := api("GET", "/v1/applications/nope", "", 404)

	samples := map[string]sample{
		"Webhook record":         {raws: [][]byte{created, updated, api("GET", "/v1/webhooks/hook", "", 200)}, client: reflect.TypeFor[cloud.Webhook]()},
		"Webhook list":           {raws: [][]byte{api("GET", "/v1/webhooks", "", 200)}, client: reflect.TypeFor[cloud.Webhooks]()},
		"Webhook secret":         {raws: [][]byte{api("GET", "/v1/webhooks/hook/secret", "", 200)}, client: reflect.TypeFor[cloud.Secret]()},
		"Conversation list item": {raws: items, client: reflect.TypeFor[cloud.Conversation]()},
		"Conversation list":      {raws: [][]byte{convs}, client: reflect.TypeFor[cloud.Conversations]()},
		"Conversation detail":    {raws: [][]byte{detail}, client: reflect.TypeFor[cloud.Conversation]()},
		"Trigger answer":         {raws: [][]byte{api("POST", "/v1/events/trigger", `{"event_type":"run.status"}`, 202)}, client: reflect.TypeFor[cloud.Triggered]()},
		// The agent, the inspector and check read deliveries as this.
		"run.status event":     {raws: events, client: reflect.TypeFor[devhook.RunStatus]()},
		"Application record":   {raws: [][]byte{api("GET", "/v1/applications/app", "", 200)}, client: reflect.TypeFor[cloud.Application]()},
		"Binary upload answer": {raws: [][]byte{binaryUpload}, client: reflect.TypeFor[cloud.BinaryUpload]()},
		"Push object":          {raws: [][]byte{pushObject(t, c, srv.Client(), binaryUpload)}, client: reflect.TypeFor[cloud.PushResult]()},
		"Run record":           {raws: [][]byte{run}, client: reflect.TypeFor[cloud.Run]()},
		"Download URL":         {raws: [][]byte{outputURL(t, api("GET", "/v1/applications/app/runs/"+start.ID+"?format=url", "", 200)), api("GET", "/v1/applications/app/runs/"+start.ID+"/input?format=url", "", 200)}, client: reflect.TypeFor[cloud.DownloadURL]()},
		"Run start answer":     {raws: [][]byte{started}, client: reflect.TypeFor[cloud.Run]()},
		"Run log":              {raws: [][]byte{api("GET", "/v1/applications/app/runs/"+start.ID+"/logs", "", 200)}, client: reflect.TypeFor[cloud.RunLog]()},
		"Run list":             {raws: [][]byte{api("GET", "/v1/applications/app/runs?status=succeeded&limit=1", "", 200)}, client: reflect.TypeFor[cloud.RunList]()},
		// Run inputs are sent inline by devhook's client: it does not read this one.
		"Input upload answer": {raws: [][]byte{api("POST", "/v1/applications/app/runs/uploadurl", "", 200)}, check: func(*testing.T) {}},
		"Organization record": {raws: orgRaws, client: reflect.TypeFor[cloud.Team]()},
		"Single sign-on check": {raws: [][]byte{api("GET", "/v1/enterprise/sso/domain?domain=corp.test", "", 200)}, check: func(t *testing.T) {
			s, err := auth.CheckSSO(ctx, srv.Client(), srv.URL, "corp.test")
			if err != nil || !s.Enabled || s.Identifier != "corp-idp" {
				t.Errorf("the client read %+v, %v; want domain_identifier corp-idp", s, err)
			}
		}},
		"Stored token record": {raws: [][]byte{tokenRecord(t)}, check: func(t *testing.T) {
			var tk auth.Tokens
			rec := `{"access_token":"a","refresh_token":"r","token_type":"Bearer","expires_at":"2026-11-22T10:00:00+00:00"}`
			if err := json.Unmarshal([]byte(rec), &tk); err != nil {
				t.Fatal(err)
			}
			if tk.AccessToken != "a" || tk.RefreshToken != "r" || tk.TokenType != "Bearer" || !tk.ExpiresAt.Equal(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)) {
				t.Errorf("the client read %+v from %s", tk, rec)
			}
		}},
		"Error body": {raws: [][]byte{notFound}, check: func(t *testing.T) {
			_, err := c.GetApplication(ctx, "nope")
			var ae *auth.HTTPError
			if !errors.As(err, &ae) || ae.Status != 404 || !strings.Contains(ae.Message, "nope") {
				t.Errorf("the client read %v from %s", err, notFound)
			}
		}},
	}

	for name, fields := range records {
		t.Run(name, func(t *testing.T) {
			s, ok := samples[name]
			if !ok {
				t.Fatalf("INTERFACE.md has a record %q this test does not know: add how to get it and which client type reads it", name)
			}
			for _, raw := range s.raws {
				var v any
				if err := json.Unmarshal(raw, &v); err != nil {
					t.Fatalf("the emulator's %s is not JSON: %s", name, raw)
				}
				for _, f := range fields {
					vals, missing := lookup(v, f.path)
					if missing != "" {
						t.Errorf("the emulator's %s lacks %s (at %s): %s", name, f.path, missing, raw)
						continue
					}
					for _, x := range vals {
						if !jsonType(x, f.typ) {
							t.Errorf("the emulator's %s has %s = %v, want %s", name, f.path, x, f.typ)
						}
					}
				}
			}
			if s.client != nil {
				for _, f := range fields {
					if ok, why := readsPath(s.client, f.path, f.typ); !ok {
						t.Errorf("the client does not read %s.%s: %s", name, f.path, why)
					}
				}
			}
			if s.check != nil {
				s.check(t)
			}
		})
	}
	for name := range samples {
		if _, ok := records[name]; !ok {
			t.Errorf("this test knows a record %q that INTERFACE.md does not list", name)
		}
	}
}

// pushObject pushes a small python package through the upload URL and
// returns the activation's answer.
func pushObject(t *testing.T, c *cloud.Client, hc *http.Client, uploadAnswer []byte) []byte {
	t.Helper()
	dir := writeFiles(t, map[string]string{"app.yaml": "type: python\nruntime: python:3.11\nfiles: [main.py]\n", "main.py": "print('{}')\n"})
	m, err := cloud.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := cloud.BuildPackage(context.Background(), m, cloud.PackageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer pkg.Remove()
	var u cloud.BinaryUpload
	json.Unmarshal(uploadAnswer, &u)
	f, err := os.Open(pkg.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := c.UploadPackage(context.Background(), u.UploadURL, f, pkg.Size); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("PUT", strings.TrimSuffix(c.Endpoint(), "/")+"/v1/applications/app/binary",
		strings.NewReader(`{"requirements":{"executable_type":"python","runtime":"python:3.11"}}`))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("activation: %d %s", resp.StatusCode, b)
	}
	return b
}

// tokenRecord is the file the client writes for a session.
func tokenRecord(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	s, err := auth.NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	tk := &auth.Tokens{AccessToken: "a", RefreshToken: "r", TokenType: "Bearer", ExpiresAt: time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}
	if err := s.Save("default", tk); err != nil {
		t.Fatal(err)
	}
	p, _ := s.Path("default")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// outputURL is the output of a run record read with format=url.
func outputURL(t *testing.T, record []byte) []byte {
	t.Helper()
	var r struct {
		Output json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(record, &r); err != nil {
		t.Fatalf("run record %s: %v", record, err)
	}
	return r.Output
}
