// Package pgerr tells apart the PostgreSQL client errors that no retry
// fixes, for the warehouse's connections (handlers) and a source's
// (sources/pgsource) alike.
package pgerr

import (
	"crypto/tls"
	"crypto/x509"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// IsConfigError reports errors without a SQLSTATE that no retry can fix:
// an unparsable connection string and a server certificate that fails
// verification. pgx returns x509 errors bare for sslmode=verify-ca and
// inside a *tls.CertificateVerificationError for verify-full.
func IsConfigError(err error) bool {
	var (
		parseErr     *pgconn.ParseConfigError
		verifyErr    *tls.CertificateVerificationError
		authorityErr x509.UnknownAuthorityError
		hostnameErr  x509.HostnameError
		invalidErr   x509.CertificateInvalidError
	)
	return errors.As(err, &parseErr) || errors.As(err, &verifyErr) ||
		errors.As(err, &authorityErr) || errors.As(err, &hostnameErr) || errors.As(err, &invalidErr)
}
