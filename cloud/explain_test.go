package cloud_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/devhook/devhook/auth"
	"github.com/devhook/devhook/cloud"
)

// What a status means depends on the call: a 409 to the cancel of a run
// that has ended says the run has ended (with the service's message), not
// that an id is taken, which stays the meaning of a 409 to a create; a 409
// to a call that gives it no meaning keeps the service's message alone.
func TestConflictMeansWhatTheCallMeans(t *testing.T) {
	c, _ := newService(t)
	ctx := t.Context()
	if _, err := c.CreateApplication(ctx, cloud.ApplicationInput{ID: "app", Name: "App"}); err != nil {
		t.Fatal(err)
	}
	r, err := c.StartRun(ctx, "app", "", cloud.RunInput{Input: []byte(`{"x":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	if done, err := c.WaitRun(ctx, "app", r.ID, 10*time.Millisecond, nil); err != nil || !done.Succeeded() {
		t.Fatalf("the run: %+v, %v", done, err)
	}
	var ae *auth.HTTPError
	_, err = c.CancelRun(ctx, "app", r.ID)
	// The service's message, whatever its words, is kept beside the hint.
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Message == "" || !strings.Contains(err.Error(), ae.Message) ||
		!strings.Contains(ae.Hint, "the run has ended already, so there is nothing to cancel: devhook runs get app "+r.ID) || strings.Contains(err.Error(), "id is taken") {
		t.Errorf("cancel of a run that succeeded: %v", err)
	}

	_, err = c.CreateApplication(ctx, cloud.ApplicationInput{ID: "app", Name: "App"})
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || ae.Hint != "that id is taken: choose another" {
		t.Errorf("an application's id taken: %v", err)
	}

	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"error": "the webhook is being changed"}`)
	}))
	defer other.Close()
	oc, err := cloud.New(cloud.Config{Endpoint: other.URL, Credentials: cloud.APIKey(key)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = oc.GetWebhook(ctx, "h")
	if !errors.As(err, &ae) || ae.Hint != "" || !strings.Contains(err.Error(), "409 Conflict: the webhook is being changed") {
		t.Errorf("a 409 to a read: %v", err)
	}
}
