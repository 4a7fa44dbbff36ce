package emulator

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/devhook/devhook"
)

// webhookInput is the body of create and update. Pointers tell a missing
// field from an empty one: all four are required.
type webhookInput struct {
	ID          *string   `json:"id"`
	EventTypes  *[]string `json:"event_types"`
	EndpointURL *string   `json:"endpoint_url"`
	Description *string   `json:"description"`
}

func (in *webhookInput) validate() error {
	var missing []string
	if in.ID == nil {
		missing = append(missing, "id")
	}
	if in.EventTypes == nil {
		missing = append(missing, "event_types")
	}
	if in.EndpointURL == nil {
		missing = append(missing, "endpoint_url")
	}
	if in.Description == nil {
		missing = append(missing, "description")
	}
	if len(missing) > 0 {
		return errorf(http.StatusBadRequest, "missing field(s): %s; a webhook needs id, event_types, endpoint_url and description", strings.Join(missing, ", "))
	}
	if n := utf8.RuneCountInString(*in.ID); n < 1 || n > 255 || !utf8.ValidString(*in.ID) {
		return errorf(http.StatusBadRequest, "id must be 1 to 255 characters, got %d", n)
	}
	if len(*in.EventTypes) == 0 {
		return errorf(http.StatusBadRequest, "event_types must not be empty; the only event type is %s", devhook.EventRunStatus)
	}
	for _, t := range *in.EventTypes {
		if t != devhook.EventRunStatus {
			return errorf(http.StatusBadRequest, "unknown event type %q in event_types; the only event type is %s", t, devhook.EventRunStatus)
		}
	}
	u, err := url.Parse(*in.EndpointURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errorf(http.StatusBadRequest, "endpoint_url must be an absolute http or https URL, got %q", *in.EndpointURL)
	}
	return nil
}

// webhookView is the record create, get, list and update answer with.
type webhookView struct {
	ID          string   `json:"id"`
	EventTypes  []string `json:"event_types"`
	EndpointURL string   `json:"endpoint_url"`
	Description string   `json:"description"`
	CreatedAt   string   `json:"created_at"`
	UpdatedAt   string   `json:"updated_at"`
}

func (h *webhook) view() webhookView {
	return webhookView{ID: h.ID, EventTypes: h.EventTypes, EndpointURL: h.EndpointURL, Description: h.Description,
		CreatedAt: h.CreatedAt.Format(timeMillis), UpdatedAt: h.UpdatedAt.Format(timeMillis)}
}

func (e *Emulator) createWebhook(w http.ResponseWriter, r *http.Request, c *call) error {
	var in webhookInput
	if err := e.decodeBody(w, r, &in); err != nil {
		return err
	}
	if err := in.validate(); err != nil {
		return err
	}
	secret, err := e.random("", 32)
	if err != nil {
		return err
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	k := whKey(c.account, *in.ID)
	if e.st.webhooks[k] != nil {
		return errorf(http.StatusConflict, "a webhook with id %q already exists; choose another id or update it with PUT", *in.ID)
	}
	h := &webhook{Account: c.account, Seq: e.nextSeq(), ID: *in.ID, EventTypes: *in.EventTypes,
		EndpointURL: *in.EndpointURL, Description: *in.Description, Secret: secret, CreatedAt: now, UpdatedAt: now}
	e.st.webhooks[k] = h
	if err := e.persist(op{bucketWebhooks, k, h}); err != nil {
		delete(e.st.webhooks, k)
		return err
	}
	writeJSON(w, http.StatusCreated, h.view())
	return nil
}

// webhooksOf returns the account's webhooks, oldest first. The caller holds e.mu.
func (e *Emulator) webhooksOf(account string) []*webhook {
	var hs []*webhook
	for _, h := range e.st.webhooks {
		if h.Account == account {
			hs = append(hs, h)
		}
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].Seq < hs[j].Seq })
	return hs
}

func (e *Emulator) listWebhooks(w http.ResponseWriter, r *http.Request, c *call) error {
	e.mu.Lock()
	items := []webhookView{}
	for _, h := range e.webhooksOf(c.account) {
		items = append(items, h.view())
	}
	e.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
	return nil
}

// lookupWebhook finds the path's webhook. The caller holds e.mu.
func (e *Emulator) lookupWebhook(c *call) (*webhook, error) {
	id := c.args["webhook_id"]
	h := e.st.webhooks[whKey(c.account, id)]
	if h == nil {
		return nil, errorf(http.StatusNotFound, "no webhook with id %q", id)
	}
	return h, nil
}

func (e *Emulator) getWebhook(w http.ResponseWriter, r *http.Request, c *call) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	h, err := e.lookupWebhook(c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h.view())
	return nil
}

func (e *Emulator) updateWebhook(w http.ResponseWriter, r *http.Request, c *call) error {
	e.mu.Lock()
	_, err := e.lookupWebhook(c)
	e.mu.Unlock()
	if err != nil {
		return err
	}
	var in webhookInput
	if err := e.decodeBody(w, r, &in); err != nil {
		return err
	}
	if err := in.validate(); err != nil {
		return err
	}
	if *in.ID != c.args["webhook_id"] {
		return errorf(http.StatusBadRequest, "id %q in the body differs from the webhook %q in the path; a webhook's id cannot change", *in.ID, c.args["webhook_id"])
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	h, err := e.lookupWebhook(c) // it may have gone meanwhile
	if err != nil {
		return err
	}
	nh := *h
	nh.EventTypes, nh.EndpointURL, nh.Description, nh.UpdatedAt = *in.EventTypes, *in.EndpointURL, *in.Description, e.now()
	k := whKey(c.account, h.ID)
	if err := e.persist(op{bucketWebhooks, k, &nh}); err != nil {
		return err
	}
	e.st.webhooks[k] = &nh
	writeJSON(w, http.StatusOK, nh.view())
	return nil
}

func (e *Emulator) deleteWebhook(w http.ResponseWriter, r *http.Request, c *call) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	h, err := e.lookupWebhook(c)
	if err != nil {
		return err
	}
	k := whKey(c.account, h.ID)
	ops := []op{{bucketWebhooks, k, nil}}
	prefix := k + "\x00"
	for ck := range e.st.convs {
		if strings.HasPrefix(ck, prefix) {
			ops = append(ops, op{bucketConvs, ck, nil})
		}
	}
	if err := e.persist(ops...); err != nil {
		return err
	}
	for _, o := range ops {
		if o.bucket == bucketConvs {
			delete(e.st.convs, o.key)
		}
	}
	delete(e.st.webhooks, k)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (e *Emulator) getSecret(w http.ResponseWriter, r *http.Request, c *call) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	h, err := e.lookupWebhook(c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": h.ID, "secret": h.Secret})
	return nil
}

// conversationItem is a list item: response_duration is null there.
type conversationItem struct {
	ID               string  `json:"id"`
	WebhookID        string  `json:"webhook_id"`
	CreatedAt        string  `json:"created_at"`
	HTTPStatus       int     `json:"http_status"`
	ResponseDuration *int64  `json:"response_duration"`
	Error            *string `json:"error"`
	Status           string  `json:"status"`
}

type conversationDetail struct {
	conversationItem
	EndpointURL  string `json:"endpoint_url"`
	RequestBody  any    `json:"request_body"`
	ResponseBody string `json:"response_body"`
}

func (cv *conversation) item() conversationItem {
	return conversationItem{ID: cv.ID, WebhookID: cv.WebhookID, CreatedAt: cv.CreatedAt.Format(timeMillis),
		HTTPStatus: cv.HTTPStatus, Error: cv.Error, Status: cv.Status}
}

func (e *Emulator) listConversations(w http.ResponseWriter, r *http.Request, c *call) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	h, err := e.lookupWebhook(c)
	if err != nil {
		return err
	}
	prefix := whKey(c.account, h.ID) + "\x00"
	var cs []*conversation
	for k, cv := range e.st.convs {
		if strings.HasPrefix(k, prefix) {
			cs = append(cs, cv)
		}
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].Seq > cs[j].Seq }) // newest first
	items := []conversationItem{}
	for _, cv := range cs {
		items = append(items, cv.item())
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
	return nil
}

func (e *Emulator) getConversation(w http.ResponseWriter, r *http.Request, c *call) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	h, err := e.lookupWebhook(c)
	if err != nil {
		return err
	}
	id := c.args["conversation_id"]
	cv := e.st.convs[convKey(c.account, h.ID, id)]
	if cv == nil {
		return errorf(http.StatusNotFound, "webhook %q has no conversation with id %q", h.ID, id)
	}
	d := conversationDetail{conversationItem: cv.item(), EndpointURL: cv.EndpointURL,
		RequestBody: cv.RequestBody, ResponseBody: cv.ResponseBody}
	ms := cv.DurationMS
	d.ResponseDuration = &ms
	writeJSON(w, http.StatusOK, d)
	return nil
}

// trigger sends one sample run.status event to every webhook of the
// account that subscribes to it; with "scenario" (a devhook extension,
// see scenario.go), a scenario's deliveries instead.
func (e *Emulator) trigger(w http.ResponseWriter, r *http.Request, c *call) error {
	var in struct {
		EventType *string         `json:"event_type"`
		Scenario  json.RawMessage `json:"scenario"`
		Speed     *float64        `json:"speed"`
	}
	// A scenario may carry large bodies: it may be as large as a run's
	// input; any other trigger has the limit of every call.
	b, err := readBody(w, r, max(e.cfg.MaxInputBytes, e.cfg.MaxBodyBytes))
	if err != nil {
		return err
	}
	derr := decodeJSON(b, &in)
	if int64(len(b)) > e.cfg.MaxBodyBytes && (derr != nil || !hasScenario(in.Scenario)) {
		return tooLarge(e.cfg.MaxBodyBytes)
	}
	if derr != nil {
		return derr
	}
	if in.EventType == nil {
		return errorf(http.StatusBadRequest, "missing field: event_type (the only event type is %s)", devhook.EventRunStatus)
	}
	if *in.EventType != devhook.EventRunStatus {
		return errorf(http.StatusBadRequest, "unknown event_type %q; the only event type is %s", *in.EventType, devhook.EventRunStatus)
	}
	if hasScenario(in.Scenario) {
		return e.triggerScenario(w, c, in.Scenario, in.Speed)
	}
	if in.Speed != nil {
		return errorf(http.StatusBadRequest, "speed goes with scenario; a sample event is sent at once")
	}
	runID, err := e.newID()
	if err != nil {
		return err
	}
	ev := devhook.RunStatus{EventType: devhook.EventRunStatus, APIVersion: devhook.APIVersion, Data: devhook.RunStatusData{
		RunID: runID, Status: devhook.LegacyStatus("succeeded"), StatusV2: "succeeded",
		CreatedAt: e.now().Format(timeSeconds), Duration: 1200, InputSize: 42, OutputSize: 42,
		ApplicationID: "sample-application", ApplicationInstanceID: "latest", ApplicationVersionID: "",
	}}
	e.mu.Lock()
	hooks := e.subscribers(c.account)
	e.mu.Unlock()
	e.goroutine(func(ctx context.Context) { e.deliverAll(ctx, c.account, hooks, ev) })
	writeJSON(w, http.StatusAccepted, map[string]any{"event_type": devhook.EventRunStatus, "webhooks": len(hooks)})
	return nil
}
