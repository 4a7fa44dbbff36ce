package main

import (
	"bytes"
	"strings"
	"testing"
)

// Three samples as perf script prints them: a relay answer's write(2)
// (public side, though a corkConn is on the way), a frame's write
// (WebSocket) and an assist of the collector under a parse (GC).
const relaySamples = `dh 20077 22495.864425:     500250 cpu-clock:ppp: 
	ffffffff821faa99 __schedule+0x3d9 ([kernel.kallsyms])
	            de6e internal/runtime/syscall/linux.Syscall6+0xe (/tmp/dh)
	           b13ea syscall.Syscall6+0x6a (/tmp/dh)
	          5cd44c github.com/devhook/devhook/relay/wire.(*corkConn).Write+0x8c (/tmp/dh)
	          5c83cc github.com/devhook/devhook/relay.(*ingressWriter).finish+0x8c (/tmp/dh)
	          5c7c57 github.com/devhook/devhook/relay.(*ingressConn).serve+0x17 (/tmp/dh)

dh 20077 22495.866256:     500250 cpu-clock:ppp: 
	            de6e internal/runtime/syscall/linux.Syscall6+0xe (/tmp/dh)
	          5cd44c github.com/devhook/devhook/relay/wire.(*corkConn).uncork+0x8c (/tmp/dh)
	          5cd44c github.com/devhook/devhook/relay/wire.(*Writer).send+0x8c (/tmp/dh)
	          5cd44c github.com/devhook/devhook/relay.(*agentConn).Deliver+0x8c (/tmp/dh)
	          5c7c57 github.com/devhook/devhook/relay.(*ingressConn).serve+0x17 (/tmp/dh)

dh 20069 22495.867028:     500250 cpu-clock:ppp: 
	           917c6 runtime.scanobject+0x66 (/tmp/dh)
	           917c6 runtime.gcAssistAlloc+0x66 (/tmp/dh)
	          36ab8b net/http.readRequest+0x5cb (/tmp/dh)
	          5c942e github.com/devhook/devhook/relay.(*ingressConn).serve+0x8ee (/tmp/dh)

dh 20069 22495.867029:     500250 cpu-clock:ppp: 
	           955b7 runtime.usleep.abi0+0x37 (/tmp/dh)
	           63f92 runtime.sysmon+0xb2 (/tmp/dh)
	           5a233 runtime.mstart1+0x93 (/tmp/dh)
`

func TestClassify(t *testing.T) {
	counts, total, err := classify(strings.NewReader(relaySamples), roles["relay"])
	if err != nil {
		t.Fatal(err)
	}
	if total != 4 {
		t.Fatalf("%d samples, want 4", total)
	}
	want := map[string]int{"public side": 1, "WebSocket write and read": 1, gcName: 1, schedName: 1}
	for name, n := range want {
		if counts[name] != n {
			t.Errorf("%s: %d samples, want %d (all: %v)", name, counts[name], n, counts)
		}
	}
	var out bytes.Buffer
	report(&out, counts, total, 40)
	if !strings.Contains(out.String(), " 25.0%    10.0 µs  public side") {
		t.Errorf("report:\n%s", out.String())
	}
}
