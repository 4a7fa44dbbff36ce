package signature_test

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/devhook/devhook"
	"github.com/devhook/devhook/signature"
)

// The vectors come from the service's interface notes, computed
// independently of this package, with one correction: the window's upper
// end is "not more than" the skew ahead, so t == now + skew is accepted
// (its vector "too far ahead" is 1 ms further, and "exactly the skew
// ahead" is new).
func TestVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/signature-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Secret string
		Body   string
		Cases  []struct {
			Name           string
			Header         *string
			NowMS          int64   `json:"now_ms"`
			SkewMS         int64   `json:"skew_ms"`
			SecretOverride *string `json:"secret_override"`
			Status         int
			Verdict        string
			Text           string
		}
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Cases) < 10 {
		t.Fatalf("only %d vectors", len(v.Cases))
	}
	for _, c := range v.Cases {
		t.Run(c.Name, func(t *testing.T) {
			secret := v.Secret
			if c.SecretOverride != nil {
				secret = *c.SecretOverride
			}
			header := ""
			if c.Header != nil {
				header = *c.Header
			}
			ver := signature.Verifier{
				Skew: time.Duration(c.SkewMS) * time.Millisecond,
				Now:  func() time.Time { return time.UnixMilli(c.NowMS) },
			}
			got := ver.Verify(secret, header, []byte(v.Body))
			if got.Result != c.Verdict || got.Status != c.Status {
				t.Fatalf("got %s %d (%s), want %s %d", got.Result, got.Status, got.Reason, c.Verdict, c.Status)
			}
			if c.Text != "" && got.Text != c.Text {
				t.Fatalf("text %q, want %q", got.Text, c.Text)
			}
		})
	}
	// Sign reproduces the valid vector byte for byte.
	want := *v.Cases[0].Header
	if got := signature.SignMillis(v.Secret, 1795341600000, []byte(v.Body)); got != want {
		t.Fatalf("SignMillis = %s, want %s", got, want)
	}
}

func TestVerifyRules(t *testing.T) {
	const secret = "s3cret"
	now := time.UnixMilli(1_800_000_000_000)
	body := []byte(`{"a":1}`)
	sig := func(ms int64) string { return signature.SignMillis(secret, ms, body) }
	nowMS := now.UnixMilli()
	tests := []struct {
		name, secret, header string
		body                 []byte
		skew                 time.Duration
		want                 string
		status               int
	}{
		{"valid", secret, sig(nowMS), body, 0, devhook.VerdictOK, 200},
		{"empty body signed", secret, signature.SignMillis(secret, nowMS, nil), nil, 0, devhook.VerdictOK, 200},
		{"missing", secret, "", body, 0, devhook.VerdictMissingSignature, 401},
		{"missing beats no secret", "", "", body, 0, devhook.VerdictMissingSignature, 401},
		{"one part", secret, "t=1", body, 0, devhook.VerdictInvalidFormat, 401},
		{"no equals", secret, "t1,v1abc", body, 0, devhook.VerdictInvalidFormat, 401},
		{"parts swapped", secret, "v1=ab,t=1", body, 0, devhook.VerdictInvalidFormat, 401},
		{"negative t", secret, "t=-5,v1=ab", body, 0, devhook.VerdictInvalidFormat, 401},
		{"empty t", secret, "t=,v1=ab", body, 0, devhook.VerdictInvalidFormat, 401},
		{"t with space", secret, "t= 1,v1=ab", body, 0, devhook.VerdictInvalidFormat, 401},
		{"t overflows", secret, "t=99999999999999999999,v1=ab", body, 0, devhook.VerdictInvalidFormat, 401},
		{"v0 instead of v1", secret, "t=1,v0=ab", body, 0, devhook.VerdictInvalidFormat, 401},
		{"format beats no secret", "", "t=x,v1=ab", body, 0, devhook.VerdictInvalidFormat, 401},
		{"seconds not ms is too old", secret, signature.SignMillis(secret, nowMS/1000, body), body, 0, devhook.VerdictInvalidTime, 401},
		{"exactly window old", secret, sig(nowMS - 300000), body, 0, devhook.VerdictInvalidTime, 401},
		{"window minus 1ms", secret, sig(nowMS - 299999), body, 0, devhook.VerdictOK, 200},
		// "not more than a small skew ahead": t == now + skew is accepted.
		{"exactly skew ahead", secret, sig(nowMS + 60000), body, 0, devhook.VerdictOK, 200},
		{"skew plus 1ms", secret, sig(nowMS + 60001), body, 0, devhook.VerdictInvalidTime, 401},
		{"skew minus 1ms", secret, sig(nowMS + 59999), body, 0, devhook.VerdictOK, 200},
		{"strict skew", secret, sig(nowMS + 5000), body, 5 * time.Second, devhook.VerdictOK, 200},
		{"strict skew plus 1", secret, sig(nowMS + 5001), body, 5 * time.Second, devhook.VerdictInvalidTime, 401},
		{"time beats no secret", "", sig(nowMS - 400000), body, 0, devhook.VerdictInvalidTime, 401},
		{"no secret", "", sig(nowMS), body, 0, devhook.VerdictNoSecret, 500},
		{"wrong secret", "other", sig(nowMS), body, 0, devhook.VerdictInvalidSignature, 401},
		{"body changed", secret, sig(nowMS), []byte(`{"a":2}`), 0, devhook.VerdictInvalidSignature, 401},
		{"t changed", secret, strings.Replace(sig(nowMS), "t=", "t=0", 1), body, 0, devhook.VerdictInvalidSignature, 401},
		{"empty v1", secret, "t=" + itoa(nowMS) + ",v1=", body, 0, devhook.VerdictInvalidSignature, 401},
		{"not hex", secret, "t=" + itoa(nowMS) + ",v1=zz", body, 0, devhook.VerdictInvalidSignature, 401},
		{"truncated", secret, sig(nowMS)[:40], body, 0, devhook.VerdictInvalidSignature, 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := signature.Verifier{Skew: tt.skew, Now: func() time.Time { return now }}
			got := v.Verify(tt.secret, tt.header, tt.body)
			if got.Result != tt.want || got.Status != tt.status {
				t.Fatalf("got %s/%d (%s), want %s/%d", got.Result, got.Status, got.Reason, tt.want, tt.status)
			}
			if got.Reason == "" || got.Text == "" {
				t.Fatalf("verdict without reason or text: %+v", got)
			}
			// An error never reveals the expected signature.
			expected := strings.TrimPrefix(sig(nowMS), "t="+itoa(nowMS)+",v1=")
			if !got.OK() && strings.Contains(got.Reason+got.Text, expected) {
				t.Fatalf("verdict leaks the expected signature: %+v", got)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func FuzzParse(f *testing.F) {
	for _, s := range []string{"t=1,v1=ab", "", ",", "t=,v1=", "t=1,v1=ab,v0=x", "v1=a,t=1", "t=18446744073709551616,v1=a", "t=1=2,v1=3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, header string) {
		p, err := signature.Parse(header)
		if err != nil {
			return
		}
		if p.T < 0 || p.TRaw == "" || strings.Count(header, ",") != 1 {
			t.Fatalf("accepted %q as %+v", header, p)
		}
		if header != "t="+p.TRaw+",v1="+p.V1 {
			t.Fatalf("parse of %q does not round-trip: %+v", header, p)
		}
		// Verification of any parsed header must not panic and must give a known verdict.
		v := signature.Verifier{Now: func() time.Time { return time.UnixMilli(p.T) }}
		switch r := v.Verify("k", header, []byte("b")).Result; r {
		case devhook.VerdictOK, devhook.VerdictInvalidSignature, devhook.VerdictInvalidTime:
		default:
			t.Fatalf("verdict %s for parsed header %q", r, header)
		}
	})
}

// The keyed MACs kept between calls never leak one secret into another's
// check, in any order and from many goroutines.
func TestVerifyWithChangingSecrets(t *testing.T) {
	body := []byte(`{"run_id":"r1"}`)
	now := time.Now()
	secrets := []string{"whsec_a", "whsec_b", "whsec_a", "whsec_c", "whsec_b"}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				s := secrets[(g+i)%len(secrets)]
				other := secrets[(g+i+1)%len(secrets)]
				h := signature.Sign(s, now, body)
				if v := signature.Verify(s, h, body, now); !v.OK() {
					t.Errorf("secret %s: %s", s, v.Reason)
					return
				}
				if other != s {
					if v := signature.Verify(other, h, body, now); v.OK() {
						t.Errorf("signed with %s, verified with %s", s, other)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// Verifying a delivery does not allocate: the MAC is computed into the
// pooled keyed MAC and v1 decoded on the stack (2 allocations, 64 bytes,
// before: the decoded v1 and the MAC's sum). A regression here costs every
// delivery.
func TestVerifyAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are checked without -race")
	}
	body := []byte(strings.Repeat("x", 1500))
	now := time.Now()
	h := signature.Sign("whsec_alloc", now, body)
	v := signature.Verifier{Now: func() time.Time { return now }}
	v.Verify("whsec_alloc", h, body) // keys the MAC
	if n := testing.AllocsPerRun(200, func() { v.Verify("whsec_alloc", h, body) }); n > 0 {
		t.Errorf("Verify allocates %.0f times, want none", n)
	}
}

// The reason a v1 is refused is the same whether v1 has a MAC's length
// (decoded without allocating) or not (decoded by encoding/hex).
func TestVerifyV1Reasons(t *testing.T) {
	const secret = "whsec_reasons"
	body := []byte(`{"a":1}`)
	now := time.Now()
	ts := strconv.FormatInt(now.UnixMilli(), 10)
	v1 := strings.TrimPrefix(signature.Sign(secret, now, body), "t="+ts+",v1=")
	other := strings.TrimPrefix(signature.Sign("whsec_other", now, body), "t="+ts+",v1=")
	tests := []struct{ name, v1, reason string }{
		{"valid", v1, "signature valid"},
		{"empty", "", "v1 is empty"},
		{"upper case", strings.ToUpper(v1), "v1 must be lowercase hexadecimal"},
		{"one upper case digit", v1[:63] + "F", "v1 must be lowercase hexadecimal"},
		{"not hex at a MAC's length", v1[:62] + "zz", "v1 is not hexadecimal"},
		{"not hex at the start", "g" + v1[1:], "v1 is not hexadecimal"},
		{"odd length", v1[:63], "v1 is not hexadecimal"},
		{"shorter", v1[:62], "the signature does not match"},
		{"longer", v1 + "00", "the signature does not match"},
		{"another secret's", other, "the signature does not match"},
	}
	vf := signature.Verifier{Now: func() time.Time { return now }}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := vf.Verify(secret, "t="+ts+",v1="+tt.v1, body)
			if !strings.HasPrefix(got.Reason, tt.reason) {
				t.Fatalf("v1 %q: got %s (%s), want a reason starting %q", tt.v1, got.Result, got.Reason, tt.reason)
			}
		})
	}
}
