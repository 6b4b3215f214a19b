package lineage

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
)

// RunIDNamespace is the UUID namespace of idem's run ids: the version 5
// UUID of the URL https://github.com/idem-data/idem/lineage/run in the
// RFC 9562 URL namespace.
const RunIDNamespace = "cc96f128-5581-5f2b-9bdf-1bfaefa68b19"

// urlNamespace is RFC 9562's namespace for URLs.
const urlNamespace = "6ba7b811-9dad-11d1-80b4-00c04fd430c8"

// RunID is the OpenLineage run id of one attempt: the version 5 UUID of
// RunIDName in RunIDNamespace. Everything it hashes is fixed once the
// attempt's audit row exists, so every event of the attempt, built
// whenever and sent however often, carries the same id, and two attempts
// never share one.
func RunID(namespace, pipeline string, auditID int64, attempt int) string {
	return uuidV5(mustParseUUID(RunIDNamespace), RunIDName(namespace, pipeline, auditID, attempt))
}

// RunIDName is the name RunID hashes: the job namespace and the pipeline,
// each preceded by its length in bytes so that no two pairs run together,
// then the audit id and the attempt, e.g. "4:shop/4:shop/1234/1". In SQL,
// with uuid-ossp:
//
//	uuid_generate_v5('cc96f128-5581-5f2b-9bdf-1bfaefa68b19',
//	  format('%s:%s/%s:%s/%s/%s', octet_length(ns), ns, octet_length(dag_id), dag_id, id, attempt))
func RunIDName(namespace, pipeline string, auditID int64, attempt int) string {
	return fmt.Sprintf("%d:%s/%d:%s/%d/%d", len(namespace), namespace, len(pipeline), pipeline, auditID, attempt)
}

// uuidV5 is RFC 9562 section 5.5: SHA-1 of the namespace's 16 bytes and the
// name, with the version and variant bits set.
func uuidV5(ns [16]byte, name string) string {
	h := sha1.New()
	h.Write(ns[:])
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return formatUUID(u)
}

func formatUUID(u [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// parseUUID reads the 8-4-4-4-12 hexadecimal form, in either case.
func parseUUID(s string) ([16]byte, bool) {
	var u [16]byte
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	digits := s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:]
	if _, err := hex.Decode(u[:], []byte(digits)); err != nil {
		return u, false
	}
	return u, true
}

func mustParseUUID(s string) [16]byte {
	u, ok := parseUUID(s)
	if !ok {
		panic("lineage: bad UUID constant " + s)
	}
	return u
}

// canonicalUUID is s in lower case when it is a UUID other than the nil
// UUID, which names no run.
func canonicalUUID(s string) (string, bool) {
	u, ok := parseUUID(s)
	if !ok || u == [16]byte{} {
		return "", false
	}
	return formatUUID(u), true
}
