package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/devhook/devhook/boltrelay"
	"github.com/devhook/devhook/jsonfile"
	"github.com/devhook/devhook/relay"
	"github.com/devhook/devhook/relay/relayclient"
	"github.com/devhook/devhook/relay/wire"
)

// channel returns the saved channel for this relay, or opens a new one;
// unreached is why a relay that could not be asked about a saved channel
// did not answer (the channel is kept: it may be up again soon), else nil.
func (o *listenOptions) channel(ctx context.Context, relayURL, relayKey string, local *relay.Server, rdb *boltrelay.Store) (cr wire.Credentials, unreached, err error) {
	// The channel per relay, so that the public URL stays the same from
	// one start to the next.
	saved := jsonfile.New[wire.Credentials](filepath.Join(o.dataDir, "channels.json"))
	cr, ok, err := saved.Get(relayKey)
	if err != nil {
		return cr, nil, savedChannelsError(err)
	}
	if ok && local != nil {
		if _, err := rdb.Channel(cr.Channel); err == nil {
			cr.PublicURL = local.PublicURL(nil, cr.Channel) // the port may differ from last time
			return cr, nil, nil
		}
	} else if ok {
		if keep, unreached := o.usable(ctx, relayURL, cr); keep {
			return cr, unreached, nil
		}
	}
	if local != nil {
		cr, err = local.OpenChannel(nil)
	} else {
		cr, err = relayclient.Open(ctx, o.network.HTTPClient(15*time.Second), relayURL, o.relayToken)
	}
	var unreachable *relayclient.UnreachableError
	switch {
	case errors.Is(err, relayclient.ErrOpenRefused) && o.relayToken == "":
		return cr, nil, fmt.Errorf("%w; this relay needs its open token: pass it with --relay-token (or DEVHOOK_RELAY_TOKEN)", err)
	case errors.Is(err, relayclient.ErrOpenRefused):
		return cr, nil, fmt.Errorf("%w; check the token given with --relay-token (or DEVHOOK_RELAY_TOKEN)", err)
	case errors.As(err, &unreachable) && unreachable.UnknownAuthority:
		return cr, nil, fmt.Errorf("%w; trust the relay's CA with --relay-ca FILE (a PEM file)", err)
	case err != nil:
		return cr, nil, err
	}
	if ok {
		fmt.Fprintf(o.stderr, "the saved channel is gone from the relay; opened a new one: the public URL changed\n")
	}
	// On a full disk, saved once there is room: this start goes on with
	// the channel meanwhile.
	if err := o.writes.Do(saved.Path()+"\x00"+relayKey, "channels.json", func() error { return saved.Put(relayKey, cr) }); err != nil {
		return cr, nil, savedChannelsError(err)
	}
	return cr, nil, nil
}

// savedChannelsError says what to do about channels.json.
func savedChannelsError(err error) error {
	var ce *jsonfile.CorruptError
	if errors.As(err, &ce) {
		return fmt.Errorf("saved channels: %w; move the file away to open a new channel", err)
	}
	return fmt.Errorf("saved channels: %w (check --data)", err)
}

// usable reports whether the relay still knows cr: a relay that rejects
// it means no; any other outcome (relay down too) keeps the channel, and
// unreached says why the relay did not answer (nil when it did). It does
// not connect: that would take the channel over from a running agent and
// draw the queue to a connection about to close.
func (o *listenOptions) usable(ctx context.Context, relayURL string, cr wire.Credentials) (keep bool, unreached error) {
	err := relayclient.Check(ctx, o.network.HTTPClient(5*time.Second), relayURL, cr)
	if errors.Is(err, relayclient.ErrRejected) {
		return false, nil
	}
	return true, err
}
