package rabbitmq

import (
	"bytes"
	"encoding/binary"
	"net"
	"sync"
	"sync/atomic"
)

// The broker adds headers to a message on its way out — x-delivery-count
// when a quorum queue hands it out again, x-death and x-first-death-* when
// it dead-letters it — and sends the result even when its content-header
// frame is then over the connection's frame_max (checked on 3.10: a
// message published 20 bytes under frame_max comes back 6 bytes over on
// its first redelivery). amqp091-go refuses such a frame by closing the
// whole connection, so the message could never be read again: every
// attempt took the connection down with every delivery in flight on it
// (their counts raised), until the queue's delivery limit moved the
// message to its DLQ — where the broker's x-death made it unreadable for
// the ingest too, for good.
//
// frameConn sits between amqp091 and the socket and lets the client read
// what the broker sends while never sending the broker more than it
// agreed to: the connection.tune the client sees offers frame_max plus
// readSlack, the connection.tune-ok the broker sees says frame_max again,
// and a body frame the client writes longer than frame_max is cut into
// body frames that fit (AMQP lets a body travel in any number of frames).
// A header frame is never cut — Lily measures every publish against
// frame_max first (framesize.go). Over TLS (amqps) amqp091 puts the TLS
// layer above the dialled connection, where frameConn would see only
// ciphertext, so there the connection stays as amqp091 negotiates it
// (docs/design.md §8, "Reading over frame_max").

// readSlack is how far over frame_max a frame from the broker may be.
const readSlack = 1 << 20

// Frame layout: type (1), channel (2), payload size (4), payload, frame-end.
const (
	frameHead    = 7
	frameEndByte = 0xCE
	frameMethod  = 1
	frameBody    = 3
)

// frameConn is a net.Conn that rewrites the frame_max of the AMQP
// handshake and cuts oversized body frames (see above).
type frameConn struct {
	net.Conn

	serverMax  atomic.Uint32 // frame_max the broker offered (0: unknown yet or unlimited)
	tuned      atomic.Bool   // the tune was seen and rewritten
	sentTuneOk atomic.Bool   // the tune-ok went out with the broker's frame_max

	rmu      sync.Mutex
	rbuf     []byte // read: bytes not yet handed to the client
	scanned  int    // read: rbuf[:scanned] are whole frames, seen and rewritten
	passRead bool   // read: past the tune (or not AMQP): bytes pass as they are

	wmu       sync.Mutex
	wbuf      []byte // write: an incomplete frame
	wpreamble int    // write: bytes of the protocol header seen
	passWrite bool   // write: not AMQP framing (never expected): pass as is
}

// newFrameConn wraps c.
func newFrameConn(c net.Conn) *frameConn { return &frameConn{Conn: c} }

// FrameMax is the frame_max the broker offered, once the handshake
// rewrote it (0 and false otherwise).
func (f *frameConn) FrameMax() (int, bool) {
	return int(f.serverMax.Load()), f.tuned.Load()
}

// Read hands the client what the broker sent, with the connection.tune's
// frame_max raised by readSlack.
func (f *frameConn) Read(p []byte) (int, error) {
	f.rmu.Lock()
	defer f.rmu.Unlock()
	for {
		avail := f.scanned
		if f.passRead {
			avail = len(f.rbuf)
		}
		if avail > 0 {
			n := copy(p, f.rbuf[:avail])
			f.rbuf = f.rbuf[n:]
			f.scanned = max(0, f.scanned-n)
			return n, nil
		}
		if f.passRead {
			return f.Conn.Read(p)
		}
		var chunk [4096]byte
		n, err := f.Conn.Read(chunk[:])
		f.rbuf = append(f.rbuf, chunk[:n]...)
		f.scanHandshake()
		if err != nil {
			if len(f.rbuf) > 0 { // hand over what came first; the next read fails
				f.passRead = true
				continue
			}
			return 0, err
		}
	}
}

// scanHandshake moves scanned over the whole frames of rbuf: the
// connection.tune gets its frame_max raised and ends the scanning, as
// does anything that is not AMQP framing (a refused protocol header:
// "AMQP" and the broker's version).
func (f *frameConn) scanHandshake() {
	for !f.passRead {
		rest := f.rbuf[f.scanned:]
		if len(rest) == 0 {
			return
		}
		if t := rest[0]; t != frameMethod && t != 2 && t != frameBody && t != 8 {
			f.passRead = true
			return
		}
		if len(rest) < frameHead {
			return
		}
		size := int(binary.BigEndian.Uint32(rest[3:7]))
		if len(rest) < frameHead+size+1 {
			return
		}
		f.scanned += frameHead + size + 1
		pl := rest[frameHead : frameHead+size]
		if rest[0] == frameMethod && size >= 12 && binary.BigEndian.Uint16(pl[0:2]) == 10 && binary.BigEndian.Uint16(pl[2:4]) == 30 {
			// connection.tune: channel-max (2), frame-max (4), heartbeat (2)
			if offered := binary.BigEndian.Uint32(pl[6:10]); offered != 0 {
				f.serverMax.Store(offered)
				binary.BigEndian.PutUint32(pl[6:10], offered+readSlack)
				f.tuned.Store(true)
			}
			f.passRead = true
		}
	}
}

// Write sends the client's frames, the connection.tune-ok's frame_max
// put back to the broker's and body frames over it cut to fit.
func (f *frameConn) Write(p []byte) (int, error) {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	if f.passWrite {
		return f.Conn.Write(p)
	}
	in := p
	if f.wpreamble < len(amqpPreamble) {
		n := min(len(amqpPreamble)-f.wpreamble, len(in))
		if !bytes.Equal(in[:n], amqpPreamble[f.wpreamble:f.wpreamble+n]) {
			f.passWrite = true // not what amqp091 writes first: leave it alone
			return f.Conn.Write(p)
		}
		if _, err := f.Conn.Write(in[:n]); err != nil {
			return 0, err
		}
		f.wpreamble += n
		in = in[n:]
	}
	limit := int(f.serverMax.Load())
	if len(f.wbuf) == 0 && (!f.tuned.Load() || f.sentTuneOk.Load()) && wholeFramesFit(in, limit) {
		if _, err := f.Conn.Write(in); err != nil { // the common case: as is
			return 0, err
		}
		return len(p), nil
	}
	f.wbuf = append(f.wbuf, in...)
	var out []byte
	for len(f.wbuf) >= frameHead {
		size := int(binary.BigEndian.Uint32(f.wbuf[3:7]))
		end := frameHead + size + 1
		if len(f.wbuf) < end {
			break
		}
		fr := f.wbuf[:end]
		f.putTuneOk(fr)
		out = appendFitted(out, fr, limit)
		f.wbuf = f.wbuf[end:]
	}
	if len(f.wbuf) == 0 {
		f.wbuf = nil
	}
	if len(out) > 0 {
		if _, err := f.Conn.Write(out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// amqpPreamble is the protocol header amqp091 writes first.
var amqpPreamble = []byte{'A', 'M', 'Q', 'P', 0, 0, 9, 1}

// putTuneOk puts the broker's frame_max back into a connection.tune-ok.
func (f *frameConn) putTuneOk(fr []byte) {
	if !f.tuned.Load() || f.sentTuneOk.Load() || fr[0] != frameMethod || len(fr) < frameHead+12 {
		return
	}
	pl := fr[frameHead:]
	if binary.BigEndian.Uint16(pl[0:2]) == 10 && binary.BigEndian.Uint16(pl[2:4]) == 31 {
		// connection.tune-ok: channel-max (2), frame-max (4), heartbeat (2)
		if limit, asked := f.serverMax.Load(), binary.BigEndian.Uint32(pl[6:10]); asked > limit || asked == 0 {
			binary.BigEndian.PutUint32(pl[6:10], limit)
		}
		f.sentTuneOk.Store(true)
	}
}

// wholeFramesFit reports whether in is a run of whole frames none of
// which needs cutting for limit (0: none).
func wholeFramesFit(in []byte, limit int) bool {
	for len(in) > 0 {
		if len(in) < frameHead {
			return false
		}
		size := int(binary.BigEndian.Uint32(in[3:7]))
		end := frameHead + size + 1
		if len(in) < end || (limit > 0 && in[0] == frameBody && end > limit) {
			return false
		}
		in = in[end:]
	}
	return true
}

// appendFitted appends frame fr to out, a body frame over limit cut into
// body frames of at most limit bytes each (0: no limit).
func appendFitted(out, fr []byte, limit int) []byte {
	if limit <= 0 || fr[0] != frameBody || len(fr) <= limit {
		return append(out, fr...)
	}
	channel := fr[1:3]
	body := fr[frameHead : len(fr)-1]
	room := limit - frameHead - 1
	for len(body) > 0 {
		n := min(room, len(body))
		out = append(out, frameBody, channel[0], channel[1])
		out = binary.BigEndian.AppendUint32(out, uint32(n))
		out = append(out, body[:n]...)
		out = append(out, frameEndByte)
		body = body[n:]
	}
	return out
}
