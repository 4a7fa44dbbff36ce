package relay

import "time"

// BodyPace exposes bodyPace, the rule that cuts a body that stalls or
// crawls, to the tests.
type BodyPace struct{ p bodyPace }

// NewBodyPace is the pace of a body that starts at now under cfg, whose
// zero values mean the Server's defaults.
func NewBodyPace(now time.Time, cfg Config) *BodyPace {
	if cfg.BodyTimeout == 0 {
		cfg.BodyTimeout = DefaultBodyTimeout
	}
	if cfg.BodyStall == 0 {
		cfg.BodyStall = DefaultBodyStall
	}
	if cfg.BodyMinRate == 0 {
		cfg.BodyMinRate = DefaultBodyMinRate
	}
	if cfg.BodyRateWindow == 0 {
		cfg.BodyRateWindow = DefaultBodyRateWindow
	}
	return &BodyPace{newBodyPace(now, &cfg)}
}

// Arrived counts n bytes arriving at now; false: the body is cut for its
// rate. Deadline is then the read deadline the connection has.
func (b *BodyPace) Arrived(now time.Time, n int) bool {
	if !b.p.arrived(now, n) {
		return false
	}
	b.p.next()
	return true
}

// Deadline is the read deadline in place; Rule, when the body is to be
// cut if no more bytes arrive; Why, what a sender cut at the deadline is
// told.
func (b *BodyPace) Deadline() time.Time { return b.p.set }
func (b *BodyPace) Rule() time.Time     { return b.p.rule() }
func (b *BodyPace) Why() string         { return b.p.why() }
