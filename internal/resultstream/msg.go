// Package resultstream publishes the results stream (a dead letter's
// result) and follows it for `idem publish --wait` and `idem backfill
// --wait`: the NATS side of package results, which holds the format.
package resultstream

import (
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/idem-data/idem/internal/results"
)

// Msg is the message of r on prefix's subject for its dataset, with its
// headers and Nats-Msg-Id.
func Msg(prefix string, r results.Result) *nats.Msg {
	return MsgFromParts(prefix, r.Dataset, r.Status, r.Stream, r.StreamSeq, r.AuditID, "", r.AppendJSON(nil))
}

// MsgFromParts is Msg for a body already encoded, with the fields its
// subject and headers need given apart (the relay reads them in its claim
// and never parses the body).
func MsgFromParts(prefix, dataset, status, stream string, seq uint64, auditID int64, token string, body []byte) *nats.Msg {
	m := nats.NewMsg(results.Subject(prefix, dataset))
	m.Data = body
	m.Header.Set(nats.MsgIdHdr, results.MsgID(stream, seq, auditID, token))
	m.Header.Set(results.HeaderEventStream, stream)
	m.Header.Set(results.HeaderEventSeq, strconv.FormatUint(seq, 10))
	m.Header.Set(results.HeaderStatus, status)
	return m
}
