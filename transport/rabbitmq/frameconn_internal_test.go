package rabbitmq

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
)

// frame builds an AMQP frame.
func frame(typ byte, channel uint16, payload []byte) []byte {
	b := []byte{typ}
	b = binary.BigEndian.AppendUint16(b, channel)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	b = append(b, payload...)
	return append(b, frameEndByte)
}

// tuneFrame is a connection.tune (10, 30) or tune-ok (10, 31) with
// frame_max max.
func tuneFrame(method uint16, max uint32) []byte {
	pl := binary.BigEndian.AppendUint16(nil, 10)
	pl = binary.BigEndian.AppendUint16(pl, method)
	pl = binary.BigEndian.AppendUint16(pl, 2047) // channel-max
	pl = binary.BigEndian.AppendUint32(pl, max)
	pl = binary.BigEndian.AppendUint16(pl, 10) // heartbeat
	return frame(frameMethod, 0, pl)
}

// readFrames splits b into frames, failing on anything else.
func readFrames(t *testing.T, b []byte) [][]byte {
	t.Helper()
	var out [][]byte
	for len(b) > 0 {
		if len(b) < frameHead {
			t.Fatalf("%d trailing bytes", len(b))
		}
		end := frameHead + int(binary.BigEndian.Uint32(b[3:7])) + 1
		if len(b) < end || b[end-1] != frameEndByte {
			t.Fatalf("a frame of %d bytes is cut or has no frame-end", end)
		}
		out = append(out, b[:end])
		b = b[end:]
	}
	return out
}

// TestFrameConnHandshake: the client sees the broker's frame_max raised
// by readSlack (the frames before the tune whole, even read a byte at a
// time), the broker sees its own frame_max in the tune-ok, and a body
// frame the client writes over frame_max reaches the broker as body
// frames that fit, on the same channel, the body unchanged.
func TestFrameConnHandshake(t *testing.T) {
	client, server := net.Pipe()
	fc := newFrameConn(client)
	start := frame(frameMethod, 0, append([]byte{0, 10, 0, 10}, bytes.Repeat([]byte("s"), 300)...))
	go func() {
		server.Write(append(append([]byte{}, start...), tuneFrame(30, 4096)...))
	}()
	var got []byte
	one := make([]byte, 1)
	for len(got) < len(start)+len(tuneFrame(30, 0)) {
		n, err := fc.Read(one)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, one[:n]...)
	}
	frames := readFrames(t, got)
	if !bytes.Equal(frames[0], start) {
		t.Errorf("connection.start changed on the way")
	}
	if !bytes.Equal(frames[1], tuneFrame(30, 4096+readSlack)) {
		t.Errorf("tune as the client sees it: % x, want frame_max %d", frames[1], 4096+readSlack)
	}
	if limit, ok := fc.FrameMax(); !ok || limit != 4096 {
		t.Errorf("FrameMax() = %d, %v; want 4096, true", limit, ok)
	}

	body := bytes.Repeat([]byte("0123456789"), 1000)
	heartbeat := frame(8, 0, nil)
	sent := append(append(append(append([]byte{}, amqpPreamble...), tuneFrame(31, 4096+readSlack)...), frame(frameBody, 7, body)...), heartbeat...)
	go func() {
		// amqp091 writes through a bufio.Writer: a frame may come in pieces.
		for len(sent) > 0 {
			n := min(len(sent), 1500)
			if _, err := fc.Write(sent[:n]); err != nil {
				t.Error(err)
				break
			}
			sent = sent[n:]
		}
		client.Close()
	}()
	wire, err := io.ReadAll(server)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(wire, amqpPreamble) {
		t.Fatalf("the protocol header did not go first")
	}
	frames = readFrames(t, wire[len(amqpPreamble):])
	if !bytes.Equal(frames[0], tuneFrame(31, 4096)) {
		t.Errorf("tune-ok as the broker sees it: % x, want frame_max 4096", frames[0])
	}
	var joined []byte
	for _, f := range frames[1 : len(frames)-1] {
		if f[0] != frameBody || binary.BigEndian.Uint16(f[1:3]) != 7 || len(f) > 4096 {
			t.Errorf("body frame: type %d, channel %d, %d bytes; want 3, 7, at most 4096", f[0], binary.BigEndian.Uint16(f[1:3]), len(f))
		}
		joined = append(joined, f[frameHead:len(f)-1]...)
	}
	if len(frames) < 5 || !bytes.Equal(joined, body) {
		t.Errorf("%d body frames carry %d bytes; want the %d bytes cut in at least 3", len(frames)-2, len(joined), len(body))
	}
	if !bytes.Equal(frames[len(frames)-1], heartbeat) {
		t.Errorf("the frame after the body changed")
	}
}

// TestFrameConnLeavesOtherBytesAlone: a broker that refuses the protocol
// version answers with "AMQP" and its own version, not a frame; the
// client reads it as sent.
func TestFrameConnLeavesOtherBytesAlone(t *testing.T) {
	client, server := net.Pipe()
	fc := newFrameConn(client)
	refusal := []byte{'A', 'M', 'Q', 'P', 0, 0, 9, 1}
	go func() {
		server.Write(refusal)
		server.Close()
	}()
	got, err := io.ReadAll(fc)
	if err != nil || !bytes.Equal(got, refusal) {
		t.Errorf("read % x (%v), want % x", got, err, refusal)
	}
	if _, ok := fc.FrameMax(); ok {
		t.Errorf("FrameMax reports a rewrite that did not happen")
	}
}
