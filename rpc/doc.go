// Package rpc is volplane's transport.
//
// One TCP port per server carries three protocols; the first byte of each
// connection selects which (see Mux):
//
//   - RPCMsgpack: the rest of the connection is one net/rpc conversation in
//     msgpack (github.com/hashicorp/net-rpc-msgpackrpc/v2 framing, encoded
//     with structs.MsgpackHandle).
//   - RPCRaft: hashicorp/raft transport traffic, handed to a RaftLayer.
//   - RPCMultiplex: a yamux session; every stream the dialer opens is a
//     msgpack RPC connection, and the accepting side may open streams back
//     (servers call client agents that way, see CallOnSession).
//   - RPCTLS: a TLS handshake with a client certificate, an RPCTLS byte
//     back from the server once it has verified that certificate, then one
//     of the three bytes above from the dialer, inside the TLS stream. With MuxConfig.RequireTLS
//     it is the only byte accepted; the peer's verified certificate is
//     handed to the handlers (Peer), which decide what it may do.
//
// Errors keep their kind across the wire: an endpoint's *structs.Error is
// sent as its text and rebuilt with structs.ParseError by Call, InmemCall and
// the pool, which is the one place that translation happens. Transport
// failures are marked so that IsConnError reports them.
package rpc

import "time"

// The first byte of a connection. These values are part of the wire format:
// never renumber them.
const (
	RPCMsgpack   byte = 0x01 // a plain msgpack RPC connection
	RPCRaft      byte = 0x02 // hashicorp/raft transport traffic
	RPCMultiplex byte = 0x03 // a yamux session; every stream is a msgpack RPC connection (no extra byte per stream)
	RPCTLS       byte = 0x04 // a TLS handshake, then one of the bytes above inside the TLS stream
)

// Defaults used when a config leaves a field at zero.
const (
	// DefaultMaxRequestBytes is the request size limit NewServerCodec applies
	// when it is given a limit <= 0.
	DefaultMaxRequestBytes int64 = 8 << 20

	// DefaultHandshakeTimeout bounds the wait for a connection's first byte.
	DefaultHandshakeTimeout = 5 * time.Second

	// DefaultMuxCloseTimeout bounds Mux.Close's wait for the handlers of
	// the connections it closed.
	DefaultMuxCloseTimeout = 5 * time.Second

	// DefaultDialTimeout bounds a pool's TCP dial.
	DefaultDialTimeout = 10 * time.Second

	// DefaultMaxIdle is how long a pool keeps a session nobody uses.
	DefaultMaxIdle = 2 * time.Minute

	// DefaultMaxStreamsPerSession bounds the streams of one yamux session
	// served at once; more wait in yamux's accept backlog, and beyond that
	// are reset by yamux.
	DefaultMaxStreamsPerSession = 1024
)
