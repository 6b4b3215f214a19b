package handlers_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-data/idem/handlers"
)

// classifyCase is one error and the fate Classify must give it; reason "" means
// transient, unavailable the warehouse circuit.
type classifyCase struct {
	name   string
	err    error
	reason string
}

// unavailable marks the cases Classify must wrap in an *UnavailableError.
const unavailable = "(unavailable)"

func pgErr(code string) *pgconn.PgError {
	return &pgconn.PgError{Severity: "ERROR", Code: code, Message: "test error " + code}
}

// sqlStateCases has one row per SQLSTATE family of the mapping table.
func sqlStateCases() []classifyCase {
	cachedPlan := pgErr(pgerrcode.FeatureNotSupported)
	cachedPlan.Message = "cached plan must not change result type"
	cachedPlan.Routine = "RevalidateCachedQuery"
	return []classifyCase{
		// Transient.
		{"08006 connection_failure", pgErr(pgerrcode.ConnectionFailure), unavailable},
		{"08003 connection_does_not_exist", pgErr(pgerrcode.ConnectionDoesNotExist), unavailable},
		{"08007 transaction_resolution_unknown", pgErr(pgerrcode.TransactionResolutionUnknown), unavailable},
		{"08P01 protocol_violation", pgErr(pgerrcode.ProtocolViolation), unavailable},
		{"0A000 cached plan changed", cachedPlan, ""},
		{"25006 read_only_sql_transaction", pgErr(pgerrcode.ReadOnlySQLTransaction), unavailable},
		{"25P02 in_failed_sql_transaction", pgErr(pgerrcode.InFailedSQLTransaction), ""},
		{"25P03 idle_in_transaction_session_timeout", pgErr(pgerrcode.IdleInTransactionSessionTimeout), ""},
		{"25P04 transaction_timeout", pgErr("25P04"), ""},
		{"40001 serialization_failure", pgErr(pgerrcode.SerializationFailure), ""},
		{"40P01 deadlock_detected", pgErr(pgerrcode.DeadlockDetected), ""},
		{"40003 statement_completion_unknown", pgErr(pgerrcode.StatementCompletionUnknown), ""},
		{"53100 disk_full", pgErr(pgerrcode.DiskFull), unavailable},
		{"53200 out_of_memory", pgErr(pgerrcode.OutOfMemory), ""},
		{"53300 too_many_connections", pgErr(pgerrcode.TooManyConnections), unavailable},
		{"54000 program_limit_exceeded", pgErr(pgerrcode.ProgramLimitExceeded), ""},
		{"55006 object_in_use", pgErr(pgerrcode.ObjectInUse), ""},
		{"55P03 lock_not_available", pgErr(pgerrcode.LockNotAvailable), ""},
		{"57014 query_canceled", pgErr(pgerrcode.QueryCanceled), ""},
		{"57P01 admin_shutdown", pgErr(pgerrcode.AdminShutdown), unavailable},
		{"57P02 crash_shutdown", pgErr(pgerrcode.CrashShutdown), unavailable},
		{"57P03 cannot_connect_now", pgErr(pgerrcode.CannotConnectNow), unavailable},
		{"57P05 idle_session_timeout", pgErr(pgerrcode.IdleSessionTimeout), ""},
		{"58030 io_error", pgErr(pgerrcode.IOError), ""},
		{"72000 snapshot_too_old", pgErr(pgerrcode.SnapshotTooOld), ""},
		{"XX000 internal_error", pgErr(pgerrcode.InternalError), ""},
		{"unknown code", pgErr("ZZ999"), ""},
		{"malformed code", pgErr("42"), ""},

		// Fatal.
		{"0A000 feature_not_supported", pgErr(pgerrcode.FeatureNotSupported), handlers.ReasonSchemaMismatch},
		{"21000 cardinality_violation", pgErr(pgerrcode.CardinalityViolation), handlers.ReasonDataException},
		{"22P02 invalid_text_representation", pgErr(pgerrcode.InvalidTextRepresentation), handlers.ReasonDataException},
		{"22003 numeric_value_out_of_range", pgErr(pgerrcode.NumericValueOutOfRange), handlers.ReasonDataException},
		{"23505 unique_violation", pgErr(pgerrcode.UniqueViolation), handlers.ReasonConstraintViolation},
		{"23502 not_null_violation", pgErr(pgerrcode.NotNullViolation), handlers.ReasonConstraintViolation},
		{"23P01 exclusion_violation", pgErr(pgerrcode.ExclusionViolation), handlers.ReasonConstraintViolation},
		{"44000 with_check_option_violation", pgErr(pgerrcode.WithCheckOptionViolation), handlers.ReasonConstraintViolation},
		{"28000 invalid_authorization_specification", pgErr(pgerrcode.InvalidAuthorizationSpecification), unavailable},
		{"28P01 invalid_password", pgErr(pgerrcode.InvalidPassword), unavailable},
		{"3D000 invalid_catalog_name", pgErr(pgerrcode.InvalidCatalogName), handlers.ReasonConfig},
		{"3F000 invalid_schema_name", pgErr(pgerrcode.InvalidSchemaName), handlers.ReasonUndefinedObject},
		{"42501 insufficient_privilege", pgErr(pgerrcode.InsufficientPrivilege), handlers.ReasonPermissionDenied},
		{"42P01 undefined_table", pgErr(pgerrcode.UndefinedTable), handlers.ReasonUndefinedObject},
		{"42703 undefined_column", pgErr(pgerrcode.UndefinedColumn), handlers.ReasonUndefinedObject},
		{"42883 undefined_function", pgErr(pgerrcode.UndefinedFunction), handlers.ReasonUndefinedObject},
		{"42704 undefined_object", pgErr(pgerrcode.UndefinedObject), handlers.ReasonUndefinedObject},
		{"42601 syntax_error", pgErr(pgerrcode.SyntaxError), handlers.ReasonInvalidSQL},
		{"42P02 undefined_parameter", pgErr(pgerrcode.UndefinedParameter), handlers.ReasonInvalidSQL},
		{"42P18 indeterminate_datatype", pgErr(pgerrcode.IndeterminateDatatype), handlers.ReasonInvalidSQL},
		{"42803 grouping_error", pgErr(pgerrcode.GroupingError), handlers.ReasonInvalidSQL},
		{"42804 datatype_mismatch", pgErr(pgerrcode.DatatypeMismatch), handlers.ReasonSchemaMismatch},
		{"42846 cannot_coerce", pgErr(pgerrcode.CannotCoerce), handlers.ReasonSchemaMismatch},
		{"42P10 invalid_column_reference", pgErr(pgerrcode.InvalidColumnReference), handlers.ReasonSchemaMismatch},
		{"42702 ambiguous_column", pgErr(pgerrcode.AmbiguousColumn), handlers.ReasonSchemaMismatch},
		{"42725 ambiguous_function", pgErr(pgerrcode.AmbiguousFunction), handlers.ReasonSchemaMismatch},
		{"428C9 generated_always", pgErr(pgerrcode.GeneratedAlways), handlers.ReasonSchemaMismatch},
		{"55000 object_not_in_prerequisite_state", pgErr(pgerrcode.ObjectNotInPrerequisiteState), handlers.ReasonSchemaMismatch},
		{"55P02 cant_change_runtime_param", pgErr(pgerrcode.CantChangeRuntimeParam), handlers.ReasonConfig},
		{"57P04 database_dropped", pgErr(pgerrcode.DatabaseDropped), handlers.ReasonConfig},
		{"P0001 raise_exception", pgErr(pgerrcode.RaiseException), handlers.ReasonDataException},
		{"P0003 too_many_rows", pgErr(pgerrcode.TooManyRows), handlers.ReasonDataException},
		{"XX001 data_corrupted", pgErr(pgerrcode.DataCorrupted), handlers.ReasonDataCorrupted},
		{"XX002 index_corrupted", pgErr(pgerrcode.IndexCorrupted), handlers.ReasonDataCorrupted},

		// Wrapped, as the strategies return them.
		{"wrapped 42703", fmt.Errorf("load orders: %w", pgErr(pgerrcode.UndefinedColumn)), handlers.ReasonUndefinedObject},
		{"wrapped twice 40001", fmt.Errorf("commit: %w", fmt.Errorf("tx: %w", pgErr(pgerrcode.SerializationFailure))), ""},
	}
}

// goErrorCases has one row per Go error without a SQLSTATE.
func goErrorCases(t *testing.T) []classifyCase {
	netTimeout := realNetTimeout(t)
	require.True(t, netTimeout.(net.Error).Timeout())
	return []classifyCase{
		{"connect refused", connectRefused(t), unavailable},
		{"net.OpError refused", dialRefused(t), ""},
		{"net timeout", netTimeout, ""},
		{"io.EOF", io.EOF, ""},
		{"io.ErrUnexpectedEOF", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), ""},
		{"ECONNRESET", &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, ""},
		{"EPIPE", fmt.Errorf("write: %w", syscall.EPIPE), ""},
		{"ECONNREFUSED", syscall.ECONNREFUSED, ""},
		{"conn closed", fmt.Errorf("commit: %w", pgconn.ErrConnClosed), ""},
		{"pool acquire deadline", fmt.Errorf("acquire: %w", context.DeadlineExceeded), ""},
		{"connect timeout", connectTimeout(t), unavailable},
		{"unclassified", errors.New("something odd"), ""},
		{"parse config", parseConfigError(t), handlers.ReasonConfig},

		// A SQLSTATE inside a *pgconn.ConnectError still decides.
		{"connect 57P03 cannot_connect_now", connectRejected(t, pgerrcode.CannotConnectNow), unavailable},
		{"connect 53300 too_many_connections", connectRejected(t, pgerrcode.TooManyConnections), unavailable},
		{"connect 28P01 invalid_password", connectRejected(t, pgerrcode.InvalidPassword), unavailable},
		{"connect 3D000 invalid_catalog_name", connectRejected(t, pgerrcode.InvalidCatalogName), unavailable},
		{"connect 08P01 unsupported startup parameter", connectRejected(t, pgerrcode.ProtocolViolation), unavailable},
		{"connect 42501 insufficient_privilege", connectRejected(t, pgerrcode.InsufficientPrivilege), unavailable},

		// TLS verification, through pgconn.Connect against a test server.
		{"tls unknown authority (verify-ca)", connectTLS(t, "verify-ca", otherCA), handlers.ReasonConfig},
		{"tls hostname (verify-full)", connectTLS(t, "verify-full", sameCA), handlers.ReasonConfig},
		{"tls expired (verify-ca)", connectTLS(t, "verify-ca", expired), handlers.ReasonConfig},
		{"tls unknown authority (verify-full)", connectTLS(t, "verify-full", otherCA), handlers.ReasonConfig},
		{"tls no system roots", fmt.Errorf("tls error: %w",
			&tls.CertificateVerificationError{Err: x509.SystemRootsError{}}), handlers.ReasonConfig},
	}
}

func TestClassify(t *testing.T) {
	t.Parallel()
	cases := append(sqlStateCases(), goErrorCases(t)...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := handlers.Classify(tc.err)
			require.Error(t, got)
			assert.ErrorIs(t, got, tc.err, "the classified error must still wrap the original")
			assert.Equal(t, tc.reason == unavailable, handlers.IsUnavailable(got), "IsUnavailable of %v", got)
			if tc.reason == unavailable {
				assert.False(t, handlers.IsFatal(got), "IsFatal of %v", got)
				assert.Equal(t, handlers.SQLState(tc.err), handlers.SQLState(got), "the SQLSTATE stays reachable")
				assert.Equal(t, got, handlers.Classify(got), "classifying twice changes nothing")
				return
			}
			assert.Equal(t, tc.reason != "", handlers.IsFatal(got), "IsFatal of %v", got)

			var fatal *handlers.FatalError
			if tc.reason == "" {
				assert.Equal(t, tc.err, got, "a transient error is returned unchanged")
				assert.False(t, errors.As(got, &fatal))
				return
			}
			require.ErrorAs(t, got, &fatal)
			assert.Equal(t, tc.reason, fatal.Reason)
			assert.Equal(t, tc.reason+": "+tc.err.Error(), got.Error())
			assert.Equal(t, handlers.SQLState(tc.err), handlers.SQLState(got), "the SQLSTATE stays reachable")

			again := handlers.Classify(got)
			assert.Equal(t, got, again, "classifying twice changes nothing")
		})
	}
}

func TestClassifyIsIdempotent(t *testing.T) {
	t.Parallel()
	for _, tc := range sqlStateCases() {
		once := handlers.Classify(tc.err)
		twice := handlers.Classify(once)
		assert.Equal(t, once, twice, tc.name)
		assert.Equal(t, handlers.IsFatal(once), handlers.IsFatal(twice), tc.name)
	}
}

func TestClassifyLeavesFatalAndCanceledAlone(t *testing.T) {
	t.Parallel()
	// Our own verdict wins over the SQLSTATE underneath.
	empty := handlers.Fatal(handlers.ReasonEmptySource, pgErr(pgerrcode.SerializationFailure))
	assert.Same(t, empty, handlers.Classify(empty))

	// Shutdown is decided by the context's cause, not here.
	assert.Same(t, context.Canceled, handlers.Classify(context.Canceled))
	canceled := fmt.Errorf("query: %w", context.Canceled)
	assert.Same(t, canceled, handlers.Classify(canceled))
	assert.False(t, handlers.IsFatal(handlers.Classify(canceled)))
	// Even when a SQL error came with it: the message is nak'ed, not dead-lettered.
	joined := errors.Join(pgErr(pgerrcode.UndefinedColumn), canceled)
	assert.Same(t, joined, handlers.Classify(joined))
}

func TestFatalErrorSurvivesWrapping(t *testing.T) {
	t.Parallel()
	base := handlers.Fatal(handlers.ReasonSchemaMismatch, pgErr(pgerrcode.DatatypeMismatch))
	for name, err := range map[string]error{
		"fmt %w":      fmt.Errorf("load orders 2026-11-28: %w", base),
		"%w twice":    fmt.Errorf("handle: %w", fmt.Errorf("load: %w", base)),
		"errors.Join": errors.Join(errors.New("rollback: conn closed"), base),
		"join then %w": fmt.Errorf("handle: %w",
			errors.Join(base, errors.New("audit failed: timeout"))),
	} {
		t.Run(name, func(t *testing.T) {
			assert.True(t, handlers.IsFatal(err))
			var fatal *handlers.FatalError
			require.ErrorAs(t, err, &fatal)
			assert.Equal(t, handlers.ReasonSchemaMismatch, fatal.Reason)
			assert.Equal(t, pgerrcode.DatatypeMismatch, handlers.SQLState(err))
			assert.Equal(t, err, handlers.Classify(err))
		})
	}
}

// fatalByBehaviour is a foreign error type, as another package would define
// it: the consumer must recognise fatality by the method, not the type.
type fatalByBehaviour bool

func (f fatalByBehaviour) Error() string { return fmt.Sprintf("fatal=%t", bool(f)) }
func (f fatalByBehaviour) Fatal() bool   { return bool(f) }

func TestIsFatalUsesBehaviour(t *testing.T) {
	t.Parallel()
	assert.True(t, handlers.IsFatal(fatalByBehaviour(true)))
	assert.True(t, handlers.IsFatal(fmt.Errorf("x: %w", fatalByBehaviour(true))))
	assert.False(t, handlers.IsFatal(fatalByBehaviour(false)))
	assert.False(t, handlers.IsFatal(errors.New("plain")))
	assert.False(t, handlers.IsFatal(pgErr(pgerrcode.UndefinedColumn)), "only Classify turns a SQLSTATE into fatal")

	var fatal interface{ Fatal() bool } = &handlers.FatalError{}
	assert.True(t, fatal.Fatal())
}

func TestNil(t *testing.T) {
	t.Parallel()
	assert.NoError(t, handlers.Fatal(handlers.ReasonConfig, nil))
	assert.Nil(t, handlers.Fatal(handlers.ReasonConfig, nil), "an untyped nil, not a nil *FatalError")
	assert.NoError(t, handlers.Classify(nil))
	assert.False(t, handlers.IsFatal(nil))
	assert.Empty(t, handlers.SQLState(nil))
	assert.Empty(t, handlers.SQLState(errors.New("no sqlstate")))

	var zero handlers.FatalError
	assert.Equal(t, "fatal", zero.Error())
	assert.NoError(t, zero.Unwrap())
}

func TestFatalErrorMessage(t *testing.T) {
	t.Parallel()
	err := handlers.Classify(fmt.Errorf("load orders: %w", &pgconn.PgError{
		Severity: "ERROR", Code: pgerrcode.UndefinedColumn, Message: `column "x" does not exist`,
	}))
	assert.EqualError(t, err, `undefined_object: load orders: ERROR: column "x" does not exist (SQLSTATE 42703)`)
	assert.Equal(t, "42703", handlers.SQLState(err))
	assert.EqualError(t, &handlers.FatalError{Err: io.EOF}, "fatal: EOF")
}

// --- real errors from pgconn and the network ---

// closedPort returns a 127.0.0.1 address on which nothing listens.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func connect(t *testing.T, url string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgconn.Connect(ctx, url)
	if err == nil {
		conn.Close(ctx)
		t.Fatalf("connect %s: unexpected success", url)
	}
	return err
}

// connectRefused is what pgx returns while Postgres restarts; pgconn.SafeToRetry
// says false for it.
func connectRefused(t *testing.T) error {
	err := connect(t, "postgres://idem@"+closedPort(t)+"/warehouse?sslmode=disable&connect_timeout=2")
	var connectErr *pgconn.ConnectError
	require.ErrorAs(t, err, &connectErr)
	require.ErrorIs(t, err, syscall.ECONNREFUSED)
	require.False(t, pgconn.SafeToRetry(err))
	return err
}

func dialRefused(t *testing.T) error {
	_, err := net.DialTimeout("tcp", closedPort(t), 2*time.Second)
	var opErr *net.OpError
	require.ErrorAs(t, err, &opErr)
	return err
}

// realNetTimeout reads from a connection whose deadline has passed.
func realNetTimeout(t *testing.T) error {
	addr := fakePostgres(t, func(conn net.Conn) { _, _ = io.Copy(io.Discard, conn) })
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(-time.Second)))
	_, err = conn.Read(make([]byte, 1))
	require.Error(t, err)
	return err
}

// connectTimeout is a server that accepts and never answers.
func connectTimeout(t *testing.T) error {
	addr := fakePostgres(t, func(conn net.Conn) { _, _ = io.Copy(io.Discard, conn) })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := pgconn.Connect(ctx, "postgres://idem@"+addr+"/warehouse?sslmode=disable")
	require.Error(t, err)
	require.True(t, pgconn.Timeout(err), "%v", err)
	return err
}

func parseConfigError(t *testing.T) error {
	_, err := pgconn.ParseConfig("postgres://%zz")
	var parseErr *pgconn.ParseConfigError
	require.ErrorAs(t, err, &parseErr)
	return err
}

// connectRejected gets a real *pgconn.ConnectError around a *pgconn.PgError, as
// when the server refuses a login.
func connectRejected(t *testing.T, code string) error {
	return connectRejectedWith(t, code, "rejected by test")
}

// connectRejectedWith is connectRejected with the server's message.
func connectRejectedWith(t *testing.T, code, message string) error {
	addr := fakePostgres(t, func(conn net.Conn) {
		backend := pgproto3.NewBackend(conn, conn)
		if _, err := backend.ReceiveStartupMessage(); err != nil {
			return
		}
		backend.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: code, Message: message})
		_ = backend.Flush()
	})
	err := connect(t, "postgres://idem@"+addr+"/warehouse?sslmode=disable")
	var connectErr *pgconn.ConnectError
	require.ErrorAs(t, err, &connectErr)
	require.Equal(t, code, handlers.SQLState(err))
	return err
}

type certCase int

const (
	otherCA certCase = iota // the client trusts a different CA
	sameCA                  // trusted, but issued for another host name
	expired                 // trusted, but expired
)

// connectTLS makes pgconn.Connect fail certificate verification against a test
// server that accepts TLS.
func connectTLS(t *testing.T, sslmode string, c certCase) error {
	notAfter := time.Now().Add(time.Hour)
	if c == expired {
		notAfter = time.Now().Add(-time.Minute)
	}
	serverCert, serverPEM := selfSigned(t, notAfter, c != sameCA)
	rootPEM := serverPEM
	if c == otherCA {
		_, rootPEM = selfSigned(t, notAfter, true)
	}
	root := filepath.Join(t.TempDir(), "root.pem")
	require.NoError(t, os.WriteFile(root, rootPEM, 0o600))

	addr := fakePostgres(t, func(conn net.Conn) {
		var req [8]byte // SSLRequest: length, code 80877103
		if _, err := io.ReadFull(conn, req[:]); err != nil || binary.BigEndian.Uint32(req[4:]) != 80877103 {
			return
		}
		if _, err := conn.Write([]byte{'S'}); err != nil {
			return
		}
		_ = tls.Server(conn, &tls.Config{Certificates: []tls.Certificate{serverCert}}).Handshake()
	})
	err := connect(t, fmt.Sprintf("postgres://idem@%s/warehouse?sslmode=%s&sslrootcert=%s", addr, sslmode, root))
	var connectErr *pgconn.ConnectError
	require.ErrorAs(t, err, &connectErr)
	switch c {
	case otherCA:
		require.ErrorAs(t, err, new(x509.UnknownAuthorityError))
	case sameCA:
		require.ErrorAs(t, err, new(x509.HostnameError))
	case expired:
		require.ErrorAs(t, err, new(x509.CertificateInvalidError))
	}
	if sslmode == "verify-full" {
		require.ErrorAs(t, err, new(*tls.CertificateVerificationError))
	}
	return err
}

// selfSigned returns a CA certificate for "db.test", and for 127.0.0.1 if
// withIP, and its PEM.
func selfSigned(t *testing.T, notAfter time.Time, withIP bool) (tls.Certificate, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "db.test"},
		DNSNames:              []string{"db.test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if withIP {
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// fakePostgres serves each connection on 127.0.0.1 with serve until the test
// ends, and returns its address.
func fakePostgres(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
				serve(conn)
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// TestRefusal holds that each login the server answers and refuses names
// its cause and the setting to change, and that what a retry can fix is no
// refusal.
func TestRefusal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code, message string
		cause, fix    string
	}{
		{pgerrcode.ProtocolViolation, "unsupported startup parameter: jit", "refused startup parameter jit", "restart idem"},
		{pgerrcode.ProtocolViolation, "unsupported startup parameter: search_path", "refused startup parameter search_path", "ignore_startup_parameters"},
		{pgerrcode.ProtocolViolation, "no such database: warehouse", `knows no database "warehouse"`, "[databases]"},
		{pgerrcode.InvalidPassword, `password authentication failed for user "idem"`, "refused the login of idem: password authentication failed", "password in postgres.url"},
		{pgerrcode.InvalidAuthorizationSpecification, `role "idem" is not permitted to log in`, `refused the login of idem: role "idem" is not permitted to log in`, "ALTER ROLE idem LOGIN"},
		{pgerrcode.InvalidCatalogName, `database "warehouse" does not exist`, `has no database "warehouse"`, "create it"},
		{pgerrcode.InsufficientPrivilege, `permission denied for database "warehouse"`, "refused the login of idem", "GRANT CONNECT ON DATABASE warehouse TO idem"},
	} {
		t.Run(tc.code+" "+tc.message, func(t *testing.T) {
			err := connectRejectedWith(t, tc.code, tc.message)
			r := handlers.Refusal(err)
			require.NotNil(t, r, "%v", err)
			assert.Contains(t, r.Cause, tc.cause)
			assert.Contains(t, r.Fix, tc.fix)
			assert.Contains(t, r.Cause, "127.0.0.1", "who refused is named")
			assert.ErrorIs(t, r, err)
			got := handlers.Classify(err)
			assert.True(t, handlers.IsUnavailable(got) && handlers.IsRefused(got), "an outage with its reason once running: %v", got)
			assert.False(t, handlers.IsFatal(got), "never the event's fault")
		})
	}
	for _, code := range []string{pgerrcode.CannotConnectNow, pgerrcode.TooManyConnections, pgerrcode.AdminShutdown} {
		assert.Nil(t, handlers.Refusal(connectRejected(t, code)), "%s is waited for, not refused", code)
	}
	// What PgBouncer says while its server is down or its pool is full.
	for _, msg := range []string{"server login has been failing, try again later (server_login_retry)",
		"no more connections allowed (max_client_conn)", "query_wait_timeout", "pgbouncer cannot connect to server"} {
		err := connectRejectedWith(t, pgerrcode.ProtocolViolation, msg)
		assert.Nil(t, handlers.Refusal(err), "%q is waited for, not refused", msg)
		assert.True(t, handlers.IsUnavailable(handlers.Classify(err)), "%q: an outage", msg)
	}
	assert.Nil(t, handlers.Refusal(connectRefused(t)))
}
