package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/signature"
	"github.com/devhook/devhook/storage"
)

// listRequests is how many times the list phase asks for the first page.
const listRequests = 200

// listPhase stores n deliveries in a fresh data directory, starts an agent
// on it and times the inspector's first page of GET /api/deliveries.
func listPhase(ctx context.Context, o options, rep *report, kids *children, bin, relayURL, forward, dir string) error {
	o.logf("inspector list: storing %d deliveries", o.list)
	start := time.Now()
	if err := fill(ctx, filepath.Join(dir, "deliveries.db"), o.list, o.secret); err != nil {
		return err
	}
	res := &listResult{Stored: o.list, FillSecs: time.Since(start).Seconds()}
	ag, ready, err := startListen(ctx, bin, relayURL, forward, o.secret, dir)
	if err != nil {
		return err
	}
	kids.add(ag)
	defer ag.kill()
	if err := timeList(ctx, ready.InspectorURL+"/api/deliveries", res); err != nil {
		return err
	}
	res.RSSAgent = mib(memStatus(ag.pid()).RSS)
	rep.List = res
	return nil
}

// timeList asks for url listRequests times, one at a time.
func timeList(ctx context.Context, url string, res *listResult) error {
	client := newSenderClient(1)
	defer client.CloseIdleConnections()
	var lat []time.Duration
	for i := 0; i < listRequests && ctx.Err() == nil; i++ {
		t0 := time.Now()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err != nil {
			res.Failed++
			continue
		}
		var page struct {
			Items []json.RawMessage `json:"items"`
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(t0))
		if err != nil || resp.StatusCode != http.StatusOK || json.Unmarshal(b, &page) != nil {
			res.Failed++
			if res.Failed == 1 && i == 0 {
				return fmt.Errorf("inspector list: %s: %.200s", resp.Status, b)
			}
			continue
		}
		res.Items = len(page.Items)
	}
	slices.Sort(lat)
	res.Requests = len(lat)
	if len(lat) > 0 {
		res.P50, res.P99, res.Max = ms(lat[len(lat)/2]), ms(lat[(len(lat)-1)*99/100]), ms(lat[len(lat)-1])
	}
	return ctx.Err()
}

// fill records n signed deliveries, each with one attempt, as an agent
// would, from several writers so that bbolt batches their commits.
func fill(ctx context.Context, path string, n int, secret string) error {
	db, err := storage.Open(path, storage.Config{})
	if err != nil {
		return err
	}
	defer db.Close()
	p := newPayload()
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := fillOne(db, p, secret, i); err != nil {
					once.Do(func() { firstErr = err })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("fill the store: %w", firstErr)
	}
	return ctx.Err()
}

func fillOne(db *storage.DB, p payload, secret string, i int) error {
	id, err := uuid.NewV7()
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	body := p.body(seqID("l", i))
	d := &devhook.Delivery{
		ID: id.String(), Channel: "bench", ReceivedAt: now, Method: http.MethodPost, Path: "/hook",
		Header: http.Header{
			"Content-Type":          {"application/json"},
			"User-Agent":            {"service-webhooks/bench"},
			devhook.SignatureHeader: {signature.Sign(secret, now, body)},
		},
		Body: body, RemoteAddr: "127.0.0.1:40000",
	}
	d.Event = devhook.ParseEvent(body)
	d.Verdict = signature.Verify(secret, d.Header.Get(devhook.SignatureHeader), body, now)
	if _, err := db.PutDelivery(d); err != nil {
		return err
	}
	_, err = db.AddAttempt(d.ID, devhook.Attempt{
		Kind: devhook.AttemptForward, Target: "http://127.0.0.1:8080/hook", StartedAt: now,
		Status: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: []byte(`{"received":true,"event_type":"run.status"}` + "\n"), Duration: devhook.Duration(300 * time.Microsecond),
	})
	return err
}
