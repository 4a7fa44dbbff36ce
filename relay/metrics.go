package relay

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Counts is what a Store tells /metrics about what it keeps.
type Counts struct {
	Channels int // channels opened
	Queued   int // deliveries waiting in queues, over all channels
	Parked   int // deliveries parked, over all channels (see Store.Park)
}

// Counter is implemented by a Store that can count what it keeps. The
// relay asks at each scrape of /metrics.
type Counter interface {
	Counts() (Counts, error)
}

// OrphanCounter is implemented by a Store that removes what refused or
// cut-short writes left behind (the cluster's objects no queued delivery
// points to): /metrics counts them.
type OrphanCounter interface {
	OrphansRemoved() uint64
}

// HealthChecker is implemented by a Store or Router that depends on
// something outside the process (a NATS connection): /healthz answers 503
// with the error while Health returns one, and shows status otherwise.
type HealthChecker interface {
	Health() (status string, err error)
}

// Outcomes of a delivery, the label "outcome" of the delivery metrics.
const (
	OutcomeAnswered = "answered"    // the agent answered; status is the receiver's
	OutcomeQueued   = "queued"      // 202: kept for the agent
	OutcomeTimeout  = "timeout"     // 504: the agent did not answer in time
	OutcomeRefused  = "refused"     // the relay refused it (404, 408, 413, 429, 431, 503)
	OutcomeGone     = "sender_gone" // the sender went away before the answer
)

// metrics is a Server's Prometheus registry: its own, never the global
// default, so that two Servers in one process count apart.
type metrics struct {
	reg        *prometheus.Registry
	deliveries *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	acked      prometheus.Counter
	readErrors prometheus.Counter
	// removeErrors counts failed removals of acknowledged deliveries;
	// removalsWaiting the deliveries whose removal failed and waits to
	// be tried again.
	removeErrors    prometheus.Counter
	removalsWaiting prometheus.Gauge
	parkErrors      prometheus.Counter
	sweepErrors     *prometheus.CounterVec
	// expired and expiredBytes count queued deliveries dropped unsent:
	// too old (Quota.MaxAge), or with their idle channel.
	expired, expiredBytes prometheus.Counter
	channelsRemoved       prometheus.Counter
	handler               http.Handler
	// counted is, for each outcome (its index: observeIngress), the series the last
	// delivery of that outcome was counted in: a delivery counted like
	// the one before it (as under load) does not look its series up by
	// their labels again, which hashes them and takes the vectors'
	// locks. The vectors' children are never deleted, so a cached one
	// stays the one /metrics shows.
	counted [outcomes]atomic.Pointer[countedAs]
}

// countedAs is where a delivery with this status is counted.
type countedAs struct {
	status int
	count  prometheus.Counter
	dur    prometheus.Observer
}

// outcomes is the number of outcomes (OutcomeAnswered and the others).
const outcomes = 5

// countDelivery counts a delivery that took d, with its status (0: none
// written) and its outcome, whose index in counted is i.
func (m *metrics) countDelivery(status, i int, outcome string, d time.Duration) {
	c := m.counted[i].Load()
	if c == nil || c.status != status {
		label := "none"
		if status != 0 {
			label = strconv.Itoa(status)
		}
		c = &countedAs{status: status, count: m.deliveries.WithLabelValues(label, outcome), dur: m.duration.WithLabelValues(outcome)}
		m.counted[i].Store(c)
	}
	c.count.Inc()
	c.dur.Observe(d.Seconds())
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "devhook_relay_deliveries_total",
			Help: "Deliveries received at /c/, by the status the sender was answered and the outcome.",
		}, []string{"status", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "devhook_relay_delivery_duration_seconds",
			Help:    "Time from a delivery's headers to its answer, by outcome.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"outcome"}),
		acked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "devhook_relay_queue_acked_total",
			Help: "Queued deliveries acknowledged by their agent and removed from the queue (counted once removed).",
		}),
		readErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "devhook_relay_queue_read_errors_total",
			Help: "Reads of a channel's queue for its agent that failed; each is tried again after a backoff.",
		}),
	}
	m.removeErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "devhook_relay_queue_remove_errors_total",
		Help: "Removals of acknowledged deliveries from the queue that failed; each is tried again after a backoff, and the delivery is not sent again meanwhile.",
	})
	m.removalsWaiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "devhook_relay_queue_removals_waiting",
		Help: "Acknowledged deliveries whose removal from the queue failed and waits to be tried again.",
	})
	m.parkErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "devhook_relay_queue_park_errors_total",
		Help: "Deliveries that can never be sent which the store could not park; each is tried again after a backoff.",
	})
	m.sweepErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "devhook_relay_sweep_errors_total",
		Help: "Steps of the sweeper that failed, by step (expire, touch, idle); each is tried again after a backoff.",
	}, []string{"step"})
	m.expired = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "devhook_relay_queue_expired_total",
		Help: "Queued deliveries dropped unsent: older than the queue's maximum age, or removed with their idle channel.",
	})
	m.expiredBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "devhook_relay_queue_expired_bytes_total",
		Help: "Bytes of the queued deliveries counted by devhook_relay_queue_expired_total.",
	})
	m.channelsRemoved = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "devhook_relay_channels_removed_total",
		Help: "Channels removed, with their queues, because no agent opened them within the relay's idle time.",
	})
	m.reg.MustRegister(m.deliveries, m.duration, m.acked, m.readErrors, m.removeErrors, m.removalsWaiting, m.parkErrors, m.sweepErrors,
		m.expired, m.expiredBytes, m.channelsRemoved,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "devhook_relay_agents_connected",
			Help: "Agents connected to this relay process.",
		}, func() float64 {
			s.mu.Lock()
			defer s.mu.Unlock()
			return float64(len(s.conns))
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "devhook_relay_inflight_bytes",
			Help: "Body bytes this relay process holds: being read, or waiting for the agent.",
		}, func() float64 {
			s.budget.mu.Lock()
			defer s.budget.mu.Unlock()
			return float64(s.budget.total)
		}),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	if c, ok := s.cfg.Store.(Counter); ok {
		m.reg.MustRegister(&storeCollector{c: c, logf: s.logStore})
	}
	if o, ok := s.cfg.Store.(OrphanCounter); ok {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "devhook_relay_queue_orphans_removed_total",
			Help: "Stored parts of deliveries that no queued delivery pointed to (left by refused or cut-short writes), removed by this relay process's sweeps.",
		}, func() float64 { return float64(o.OrphansRemoved()) }))
	}
	// A store that cannot count (NATS away) leaves its gauges out of the
	// scrape, not the whole of it: the counters of its failures are what
	// an operator looks at then.
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorLog: logAdapter(s.logStore), ErrorHandling: promhttp.ContinueOnError})
	return m
}

// storeCollector reads the store's counts once per scrape.
type storeCollector struct {
	c    Counter
	logf func(string, ...any)
}

var (
	descChannels = prometheus.NewDesc("devhook_relay_channels", "Channels opened (in the cluster, when clustered).", nil, nil)
	descQueued   = prometheus.NewDesc("devhook_relay_queue_depth", "Deliveries waiting in queues for their agent, over all channels (in the cluster, when clustered).", nil, nil)
	descParked   = prometheus.NewDesc("devhook_relay_parked_deliveries", "Deliveries parked because they can never be sent to their agent, over all channels (in the cluster, when clustered): see devhook relay parked.", nil, nil)
)

func (c *storeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descChannels
	ch <- descQueued
	ch <- descParked
}

func (c *storeCollector) Collect(ch chan<- prometheus.Metric) {
	n, err := c.c.Counts()
	if err != nil {
		c.logf("relay: metrics: count channels and queue: %v", err)
		ch <- prometheus.NewInvalidMetric(descQueued, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(descChannels, prometheus.GaugeValue, float64(n.Channels))
	ch <- prometheus.MustNewConstMetric(descQueued, prometheus.GaugeValue, float64(n.Queued))
	ch <- prometheus.MustNewConstMetric(descParked, prometheus.GaugeValue, float64(n.Parked))
}

type logAdapter func(string, ...any)

func (l logAdapter) Println(v ...any) { l("relay: metrics: %v", v) }

// Metrics serves the relay's Prometheus metrics. The Server's own handler
// serves them at /metrics too, unless Config.PrivateMetrics.
func (s *Server) Metrics() http.Handler { return s.metrics.handler }

// observeIngress serves a delivery and counts it.
func (s *Server) observeIngress(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	s.serveIngress(sw, r)
	i, outcome := 0, OutcomeRefused
	switch {
	case sw.byAgent:
		i, outcome = 1, OutcomeAnswered
	case sw.status == http.StatusAccepted:
		i, outcome = 2, OutcomeQueued
	case sw.status == http.StatusGatewayTimeout:
		i, outcome = 3, OutcomeTimeout
	case sw.status == 0:
		i, outcome = 4, OutcomeGone
	}
	s.metrics.countDelivery(sw.status, i, outcome, time.Since(start))
}

// answeredByAgent marks w's answer as the agent's.
func answeredByAgent(w http.ResponseWriter) {
	if sw, ok := w.(*statusWriter); ok {
		sw.byAgent = true
	}
}

// statusWriter remembers the status written. Unwrap keeps
// http.ResponseController working through it.
type statusWriter struct {
	http.ResponseWriter
	status  int
	byAgent bool
	id      [1]string // the Devhook-Delivery header's value (setDeliveryID)
}

// setDeliveryID sets w's Devhook-Delivery header to id: behind
// observeIngress, to a slice of its statusWriter, which saves a delivery
// an allocation of its own.
func setDeliveryID(w http.ResponseWriter, id string) {
	if sw, ok := w.(*statusWriter); ok {
		sw.id[0] = id
		w.Header()["Devhook-Delivery"] = sw.id[:]
		return
	}
	w.Header().Set("Devhook-Delivery", id)
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// serveHealth answers /healthz: 200 "ok", or 503 with what is wrong.
func (s *Server) serveHealth(w http.ResponseWriter) {
	var lines []string
	seen := map[HealthChecker]bool{}
	for _, c := range []any{s.cfg.Store, s.router} {
		hc, ok := c.(HealthChecker)
		if !ok || seen[hc] {
			continue
		}
		seen[hc] = true
		status, err := hc.Health()
		if err != nil {
			httpError(w, http.StatusServiceUnavailable, "unhealthy: "+err.Error())
			return
		}
		if status != "" {
			lines = append(lines, status)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Write([]byte("ok\n"))
	for _, l := range lines {
		w.Write([]byte(l + "\n"))
	}
}
