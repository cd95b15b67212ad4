package rabbitmq

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/lily-mq/lily/evidence"
)

// TestFitEvidenceOrder: the stack goes first, then the error message is
// shortened (on a rune boundary) before anything else is cut; the original
// headers are never touched; what cannot fit fails with ErrFrameTooLarge.
func TestFitEvidenceOrder(t *testing.T) {
	orig := amqp.Table{"blob": strings.Repeat("o", 5000), evidence.HeaderErrorType: "kept: the original's own"}
	build := func() *amqp.Publishing {
		h := amqp.Table{}
		for k, v := range orig {
			h[k] = v
		}
		h[evidence.HeaderReason] = "permanent"
		h[evidence.HeaderEventID] = "e-1"
		h[evidence.HeaderErrorStack] = strings.Repeat("s", 4000)
		h[evidence.HeaderErrorMessage] = strings.Repeat("ğ", 500) // 2 bytes each
		h[evidence.HeaderHost] = "host-1"
		return &amqp.Publishing{MessageId: "e-1", Headers: h}
	}
	base := build()
	full := headerFrameSize(base)

	// Room for all but the stack and half the message.
	p := build()
	limit := full - 4000 - 500
	cut, err := fitEvidence(p, orig, limit, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := headerFrameSize(p); got > limit {
		t.Errorf("frame %d bytes, limit %d", got, limit)
	}
	if _, ok := p.Headers[evidence.HeaderErrorStack]; ok {
		t.Error("stack kept")
	}
	msg, _ := p.Headers[evidence.HeaderErrorMessage].(string)
	if !strings.HasSuffix(msg, truncatedSuffix) || !utf8.ValidString(msg) || len(msg) < 200 {
		t.Errorf("error message not shortened cleanly: %d bytes, valid %t", len(msg), utf8.ValidString(msg))
	}
	if p.Headers[evidence.HeaderHost] != "host-1" {
		t.Error("the host was cut although the shortened message made room")
	}
	if want := evidence.HeaderErrorStack + "," + evidence.HeaderErrorMessage + "(shortened)"; p.Headers[HeaderEvidenceTruncated] != want || strings.Join(cut, ",") != want {
		t.Errorf("marker %q cut %v, want %q", p.Headers[HeaderEvidenceTruncated], cut, want)
	}
	for k, v := range orig {
		if p.Headers[k] != v {
			t.Errorf("original header %s changed", k)
		}
	}

	// Room for nothing beyond the essentials: everything cuttable goes,
	// the original's error type (not Lily's) stays.
	p = build()
	_, err = fitEvidence(p, orig, full-4000-1000+60, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Headers[evidence.HeaderErrorMessage]; ok {
		t.Error("error message kept")
	}
	if p.Headers[evidence.HeaderErrorType] != orig[evidence.HeaderErrorType] {
		t.Error("an original header was cut")
	}

	// No room at all: refused, named.
	p = build()
	if _, err := fitEvidence(p, orig, 5000, 0); !errors.Is(err, ErrFrameTooLarge) || !strings.Contains(err.Error(), "frame_max is 5000") {
		t.Errorf("err %v, want ErrFrameTooLarge naming frame_max", err)
	}
	// Headroom counts against the limit.
	p = build()
	if cut, err := fitEvidence(p, orig, full, 0); err != nil || cut != nil {
		t.Errorf("fits as it is: cut %v err %v", cut, err)
	}
	if cut, _ := fitEvidence(p, orig, full, 64); len(cut) == 0 {
		t.Error("headroom ignored")
	}
}
