package main

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/running"
)

// The announcement: listen ready once connected, its webhook taken and
// listen.json written; both undone before the agent stops.

// announce waits for the agent's first connection (or its word that it
// cannot record), takes the service's webhook, writes listen.json and
// prints the ready line; then it waits for ctx, and undoes the webhook
// and removes listen.json before the agent stops. parent is the
// command's context: its end (Ctrl-C) is said on the terminal.
func (l *listening) announce(ctx, parent context.Context) error {
	o, out := l.o, l.out
	select {
	case <-ctx.Done():
		return nil
	case <-l.connected:
	case <-l.cannotRecord:
	}
	var webhook, webhookNote, secret string
	if l.service != nil {
		reg, err := o.connectService(ctx, l.service, l.creds.PublicURL, l.ag)
		if err != nil {
			return err
		}
		webhook, webhookNote, secret = reg.id, reg.note(l.creds.PublicURL, o.dataDir), reg.secret
		out.setWebhook(webhook)
		defer func() { // while the agent still runs
			if err := reg.undo(context.WithoutCancel(ctx)); err != nil {
				out.logf(o.stderr)("%v", err)
			} else if msg := reg.undone(); msg != "" {
				out.note(msg)
			}
		}()
	}
	// Where the other commands find this listen: written before the
	// ready line, so that a script that waits for it finds the file
	// (on a full disk, once there is room).
	remove, err := l.writeRunning(running.Listen{PID: os.Getpid(), Data: absDir(o.dataDir),
		InspectorURL: l.inspectURL, PublicURL: l.creds.PublicURL, RelayURL: l.relay.url, Channel: l.creds.Channel,
		Webhook: webhook, StartedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	defer remove()
	// Connected or not, said under the lock of the first connection's
	// line: it comes after a ready line that said not yet.
	l.mu.Lock()
	if !l.everUp {
		l.waitingSince = time.Now()
	}
	out.ready(readyInfo{PublicURL: l.creds.PublicURL, InspectorURL: l.inspectURL, Channel: l.creds.Channel,
		Forward: l.ag.Targets(), Routes: l.ag.Routes(), Local: l.relay.localOnly, SecretKnown: l.ag.SecretKnown(), Verify: o.verify, Data: o.dataDir,
		Webhook: webhook, Secret: secret, webhookNote: webhookNote, waiting: !l.everUp, builtIn: l.relay.local != nil, relayUnreached: briefly(l.relayUnreached)})
	l.mu.Unlock()
	<-ctx.Done()
	if parent.Err() != nil {
		out.stopping(l.ag.InFlight(), o.stderr)
	}
	return nil
}

// writeRunning writes listen.json, now or once there is room, and returns
// what removes it: at once, or, while it still waits, by writing nothing.
func (l *listening) writeRunning(me running.Listen) (remove func(), err error) {
	dir := l.o.dataDir
	var written func() error // set under the writes' lock
	err = l.o.writes.Do(running.Path(dir), running.FileName, func() (err error) {
		written, err = running.Write(dir, me)
		return err
	})
	return func() {
		l.o.writes.Do(running.Path(dir), running.FileName, func() error {
			if written == nil {
				return nil
			}
			return written()
		})
	}, err
}

// briefly says why the relay could not be reached in a few words (the
// agent's own messages say the rest as it tries again), or "" for nil.
func briefly(err error) string {
	var ue *relayclient.UnreachableError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &ue):
		return ue.Reason
	}
	return err.Error()
}
