package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/devhook/devhook/cloud"
	"github.com/devhook/devhook/jsonfile"
	"github.com/devhook/devhook/pending"
)

// newWebhookID is devhook-<random>.
func newWebhookID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "devhook-" + hex.EncodeToString(b)
}

// registration is what listen --register or --webhook did at the service,
// and how to undo it on exit.
type registration struct {
	client  *cloud.Client
	id      string
	secret  string
	created bool // by --register: deleted on exit unless keep
	reused  bool // left by an earlier listen of this data directory
	// restoreURL is the endpoint_url to put back on exit (--update-url).
	restoreURL string
	keep       bool
	saved      savedWebhooks
	key        string
}

// refuseLocalOnly says why a remote service cannot use a public URL that
// only this machine reaches.
func refuseLocalOnly(c *cloud.Client, publicURL string, local bool) error {
	u, err := url.Parse(publicURL)
	if err != nil {
		return fmt.Errorf("the public URL %q is not a URL: %w", publicURL, err)
	}
	if c.IsLoopback() || (!local && !cloud.IsLoopbackHost(u.Hostname())) {
		return nil
	}
	return fmt.Errorf("the public URL %s is reachable from this machine only (the built-in relay listens on loopback), "+
		"and the service at %s is not on this machine, so its deliveries could not arrive: "+
		"run a relay the service can reach (devhook relay serve --public-url https://…, see docs/DEPLOY.md) "+
		"and pass it with --relay URL; against devhook emulate on this machine the built-in relay works", publicURL, c.Endpoint())
}

// registerWebhook creates this listen's webhook, or takes over the one an
// earlier listen of the same data directory left (killed before it could
// delete it), pointing it at publicURL. Its id is saved before it is
// created, so that a listen killed at any moment leaves at most that one.
func registerWebhook(ctx context.Context, c *cloud.Client, dataDir string, writes *pending.Writes, publicURL string, keep bool, now time.Time) (*registration, error) {
	r := &registration{client: c, created: true, keep: keep,
		saved: savedWebhooksIn(dataDir, writes), key: c.Endpoint() + " " + c.Team()}
	host, _ := os.Hostname()
	in := cloud.WebhookInput{EventTypes: []string{cloud.EventRunStatus}, EndpointURL: publicURL,
		Description: fmt.Sprintf("devhook listen on %s, started %s (data %s)", host, now.Format(time.RFC3339), dataDir)}

	prev, err := r.saved.get(r.key)
	if err != nil {
		return nil, err
	}
	if prev != "" {
		in.ID = prev
		if _, err := c.GetWebhook(ctx, prev); err == nil {
			if _, err := c.UpdateWebhook(ctx, in); err != nil {
				return nil, fmt.Errorf("point webhook %s, left by an earlier devhook listen, at %s: %w", prev, publicURL, err)
			}
			r.id, r.reused = prev, true
		} else if !cloud.IsNotFound(err) {
			return nil, fmt.Errorf("look for webhook %s, left by an earlier devhook listen: %w", prev, err)
		}
	}
	if r.id == "" {
		if in.ID == "" {
			in.ID = newWebhookID()
			if err := r.saved.put(r.key, in.ID); err != nil {
				return nil, err
			}
		}
		if _, err := c.CreateWebhook(ctx, in); err != nil {
			if !cloud.IsConflict(err) || prev == "" {
				r.saved.remove(r.key, in.ID)
				return nil, fmt.Errorf("register a webhook for %s: %w", publicURL, err)
			}
			// Created meanwhile under the saved id: take it.
			if _, err := c.UpdateWebhook(ctx, in); err != nil {
				return nil, fmt.Errorf("point webhook %s at %s: %w", in.ID, publicURL, err)
			}
		}
		r.id = in.ID
	}
	s, err := c.WebhookSecret(ctx, r.id)
	if err != nil {
		err = fmt.Errorf("get the secret of webhook %s: %w", r.id, err)
		if derr := r.undo(context.WithoutCancel(ctx)); derr != nil {
			err = fmt.Errorf("%w; and %w", err, derr)
		}
		return nil, err
	}
	r.secret = s.Secret
	return r, nil
}

// useWebhook takes an existing webhook: its secret, and with updateURL its
// endpoint_url (the old one is restored on exit).
func useWebhook(ctx context.Context, c *cloud.Client, id, publicURL string, updateURL bool) (*registration, error) {
	h, err := c.GetWebhook(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("use webhook %s: %w", id, err)
	}
	r := &registration{client: c, id: id}
	if updateURL && h.EndpointURL != publicURL {
		in := h.Input()
		in.EndpointURL = publicURL
		if _, err := c.UpdateWebhook(ctx, in); err != nil {
			return nil, fmt.Errorf("point webhook %s at %s: %w", id, publicURL, err)
		}
		r.restoreURL = h.EndpointURL
	}
	s, err := c.WebhookSecret(ctx, id)
	if err != nil {
		err = fmt.Errorf("get the secret of webhook %s: %w", id, err)
		if derr := r.undo(context.WithoutCancel(ctx)); derr != nil {
			err = fmt.Errorf("%w; and %w", err, derr)
		}
		return nil, err
	}
	r.secret = s.Secret
	return r, nil
}

// undo deletes a webhook listen created (unless keep) or puts back the URL
// it replaced. It returns what it did, for the terminal.
func (r *registration) undo(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	switch {
	case r.created && !r.keep:
		if err := r.client.DeleteWebhook(ctx, r.id); err != nil && !cloud.IsNotFound(err) {
			return fmt.Errorf("delete webhook %s: %w (the next devhook listen --register with this --data takes it over; or delete it with devhook webhooks delete %s)", r.id, err, shellQuote(r.id))
		}
		return r.saved.remove(r.key, r.id)
	case r.restoreURL != "":
		h, err := r.client.GetWebhook(ctx, r.id)
		if err != nil {
			return fmt.Errorf("restore the endpoint_url of webhook %s: %w", r.id, err)
		}
		in := h.Input()
		in.EndpointURL = r.restoreURL
		if _, err := r.client.UpdateWebhook(ctx, in); err != nil {
			return fmt.Errorf("restore the endpoint_url of webhook %s to %s: %w", r.id, r.restoreURL, err)
		}
	}
	return nil
}

// undone says what undo did.
func (r *registration) undone() string {
	switch {
	case r.created && !r.keep:
		return "deleted webhook " + r.id
	case r.created:
		return "kept webhook " + r.id + " (--keep); the next devhook listen --register with this --data reuses it"
	case r.restoreURL != "":
		return "webhook " + r.id + " points at " + r.restoreURL + " again"
	}
	return ""
}

// savedWebhooks remembers, per service and team, the webhook that listen
// --register created, so that the next start finds one a killed listen left.
// On a full disk, its writes wait for room (writes): the webhook is
// registered all the same, and a listen killed before there is room
// leaves it unsaid.
type savedWebhooks struct {
	file   *jsonfile.Map[string]
	writes *pending.Writes
}

// savedWebhooksIn is the webhooks.json of dataDir, written through writes.
func savedWebhooksIn(dataDir string, writes *pending.Writes) savedWebhooks {
	return savedWebhooks{jsonfile.New[string](filepath.Join(dataDir, "webhooks.json")), writes}
}

func (s savedWebhooks) get(key string) (string, error) {
	id, _, err := s.file.Get(key)
	return id, s.error(err)
}

func (s savedWebhooks) put(key, id string) error {
	return s.error(s.write(key, func() error { return s.file.Put(key, id) }))
}

// remove forgets key when it still names id; a put of key still waiting
// for room is dropped.
func (s savedWebhooks) remove(key, id string) error {
	return s.error(s.write(key, func() error {
		return s.file.Update(func(m map[string]string) bool {
			if m[key] != id {
				return false
			}
			delete(m, key)
			return true
		})
	}))
}

// write runs the write of key's entry, through s.writes when there are.
func (s savedWebhooks) write(key string, fn func() error) error {
	if s.writes == nil {
		return fn()
	}
	return s.writes.Do(s.file.Path()+"\x00"+key, "webhooks.json", fn)
}

// error says what to do about webhooks.json.
func (s savedWebhooks) error(err error) error {
	var ce *jsonfile.CorruptError
	switch {
	case errors.As(err, &ce):
		return fmt.Errorf("registered webhooks: %w; move the file away (a webhook it named may be left at the service: devhook webhooks list)", err)
	case err != nil:
		return fmt.Errorf("registered webhooks: %w (check --data)", err)
	}
	return nil
}

// note is the ready block's line about the webhook listen uses.
func (r *registration) note(publicURL, dataDir string) string {
	switch {
	case r.reused:
		return "registered webhook " + r.id + " → " + publicURL + " (taken over from an earlier devhook listen of " + dataDir + ")"
	case r.created:
		return "registered webhook " + r.id + " → " + publicURL
	case r.restoreURL != "":
		return "using webhook " + r.id + " → " + publicURL + " (was " + r.restoreURL + "; put back on exit)"
	default:
		return "using the secret of webhook " + r.id
	}
}
