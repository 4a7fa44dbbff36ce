package emulator

import (
	"net/http"
	"strings"
	"unicode/utf8"
)

// Applications: created, read, and the instances a run may name.

// Every application has the instances latest (its default, which pushing
// creates) and devint, as the service creates them; a run may name either.
// Both run what was pushed: devint is the instance the service's own
// clients start runs on by default (docs/INTERFACE.md says why).
const defaultInstance = "latest"

// instances returns the instances of every application.
func instances() []string { return []string{defaultInstance, "devint"} }

type applicationView struct {
	ID                        string `json:"id"`
	Name                      string `json:"name"`
	Description               string `json:"description"`
	Type                      string `json:"type"`
	DefaultInstance           string `json:"default_instance"`
	DefaultExperimentInstance string `json:"default_experiment_instance"`
	SubscriptionID            string `json:"subscription_id"`
	Locked                    bool   `json:"locked"`
	CreatedAt                 string `json:"created_at"`
	UpdatedAt                 string `json:"updated_at"`
}

func (a *application) view() applicationView {
	return applicationView{ID: a.ID, Name: a.Name, Description: a.Description, Type: "custom",
		DefaultInstance: defaultInstance, CreatedAt: a.CreatedAt.Format(timeMicros), UpdatedAt: a.UpdatedAt.Format(timeMicros)}
}

func (e *Emulator) createApplication(w http.ResponseWriter, r *http.Request, c *call) error {
	var in struct {
		ID          *string `json:"id"`
		Name        *string `json:"name"`
		Description *string `json:"description"`
	}
	if err := e.decodeBody(w, r, &in); err != nil {
		return err
	}
	switch {
	case in.ID == nil:
		return errorf(http.StatusBadRequest, "missing field: id")
	case utf8.RuneCountInString(*in.ID) < 1 || utf8.RuneCountInString(*in.ID) > 255:
		return errorf(http.StatusBadRequest, "id must be 1 to 255 characters")
	case in.Name == nil || *in.Name == "":
		return errorf(http.StatusBadRequest, "missing field: name")
	}
	desc := ""
	if in.Description != nil {
		desc = *in.Description
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	k := acctKey(c.account, *in.ID)
	if e.st.apps[k] != nil {
		return errorf(http.StatusConflict, "an application with id %q already exists", *in.ID)
	}
	a := &application{Account: c.account, ID: *in.ID, Name: *in.Name, Description: desc, CreatedAt: now, UpdatedAt: now}
	if err := e.persist(op{bucketApps, k, a}); err != nil {
		return err
	}
	e.st.apps[k] = a
	writeJSON(w, http.StatusCreated, a.view())
	return nil
}

func (e *Emulator) lookupApplication(c *call) (*application, error) {
	id := c.args["application_id"]
	a := e.st.apps[acctKey(c.account, id)]
	if a == nil {
		return nil, errorf(http.StatusNotFound, "no application with id %q; create it with POST /v1/applications", id)
	}
	return a, nil
}

func (e *Emulator) getApplication(w http.ResponseWriter, r *http.Request, c *call) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	a, err := e.lookupApplication(c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a.view())
	return nil
}

// instance returns the instance a run request names: instance_id, or the
// default one when absent. 404 for an instance the application lacks.
func instanceOf(r *http.Request, c *call) (string, error) {
	instance := r.URL.Query().Get("instance_id")
	if instance == "" {
		return defaultInstance, nil
	}
	for _, i := range instances() {
		if i == instance {
			return instance, nil
		}
	}
	return "", errorf(http.StatusNotFound, "application %q has no instance %q; its instances are %s",
		c.args["application_id"], instance, strings.Join(instances(), " and "))
}
