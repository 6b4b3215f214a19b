// Package files is a dataset source made of files: CSV, NDJSON or Parquet
// under one prefix per partition, in S3-compatible object storage or on a
// local disk. It says where a partition's files are, whether they are
// complete, which files they are (an identity the audit can keep), and
// streams each one into a COPY on the load's own connection.
//
// It never opens a transaction, commits or rolls back: the caller (the
// handlers) owns the load's transaction and gives Copy its connection. It
// never lists more than the partition's own prefix, never reads a whole
// file into memory, never puts a file name or a value into SQL text (only
// the target's identifiers, quoted), and never shows credentials in an
// error. It imports no idem package above schemas.
//
// # Use
//
// One load of partition p, as the handler would run it:
//
//	spec := files.Spec{URL: "s3://lake/orders/dt={partition}/", Format: files.CSV,
//		Ready: files.ReadyRule{Marker: "_SUCCESS"}}     // from the dataset's config; spec.Validate() at startup
//	store, err := files.NewStore(spec, s3opts)         // once per dataset
//	prefix, err := files.Resolve(spec, p)              // "orders/dt=2026-11-28/"
//	r, err := files.Ready(ctx, store, spec, prefix, time.Now())
//	if err := r.Err(); err != nil { ... }              // *NotReadyError: retry later
//	target := files.Target{Table: pgx.Identifier{"analytics", "orders"},
//		Columns: cols,                                 // name and type, from information_schema.columns
//		Fill:    map[string]string{"dt": p.Key}}       // what the files lack
//	rows, err := files.Copy(ctx, tx.Conn().PgConn(), store, spec, &r.Listing, target)
//
// r.Listing then holds, per file, its key, size, ETag or modification time,
// S3 version, local SHA-256 and rows read, and a Fingerprint of the whole
// set: what the audit records, and what tells a later event whether the
// partition's files changed. The strategies decide where the rows go
// (Target can be a staging table the strategy then merges from).
//
// # URL templates
//
// Spec.URL is s3://BUCKET/path/ or file:///absolute/path/, ending in "/",
// with at least one placeholder in the path:
//
//   - {partition} is the partition key as it is: 2026-11-28 for a date,
//     2026-11-28T13:00:00Z for an hour, the text of a text partition. A key
//     that is empty, "." or "..", or holds "/", "\" or a control character
//     is refused: it names exactly one prefix.
//   - {partition:LAYOUT} formats a date or hour partition with strftime
//     directives: %Y (2026), %m (11), %d (28), %H (13), %M, %S, %j (day of
//     the year, 332) and %% (a %). Anything else in LAYOUT is literal, so
//     s3://lake/orders/{partition:%Y/%m/%d}/ and
//     file:///data/orders/year={partition:%Y}/month={partition:%m}/ work.
//
// An S3 store is the bucket and keys are relative to it; a local store is
// rooted at the directory above the first placeholder (file:///data/orders/
// for file:///data/orders/dt={partition}/), every access goes through
// os.Root, and keys are relative to that root.
//
// # Which files
//
// The files of a partition are those directly under its prefix whose name
// matches Spec.Pattern (path.Match; empty matches all). A pattern with "/"
// reaches that many levels deeper ("*/part-*.parquet") by listing only the
// matching sub-prefixes, each with a delimiter, so a listing never walks a
// bucket: dt=2026-11-2/ never sees dt=2026-11-28/. Names starting with "_"
// or "." (_SUCCESS, _temporary/, .crc files) never match, nor does the
// ready rule's marker or manifest.
//
// # Ready rules
//
// Spec.Ready holds at most one rule. Ready applies it and lists the files:
//
//   - Marker ("_SUCCESS"): ready once that object exists at the prefix; a
//     marker with no data file is an empty partition.
//   - Manifest ("manifest.json"): ready once it exists; the partition is
//     then exactly the files its Redshift-style entries name
//     ({"entries":[{"url":"s3://…","mandatory":true,"meta":{"content_length":N}}]}),
//     anywhere in the same bucket or root, Pattern not applied. A
//     mandatory entry that is absent, a size that differs from
//     content_length, an entry outside the store: a *ManifestError naming
//     each. An optional entry that is absent is skipped.
//   - QuietFor (with MinFiles, default 1): ready once at least MinFiles
//     files are there and none changed for QuietFor, by the store's
//     modification times against the caller's clock.
//   - No rule: the event says the partition is ready. No file at all is a
//     *MissingFilesError ("missing_files: …", fatal): nothing will appear by
//     retrying the same event. A source whose files may trail its events
//     needs a rule.
//
// A rule not met is not an error: Readiness.Ready is false and Reason says
// why ("marker _SUCCESS not found", "last file changed 2m0s ago, quiet_for
// 10m0s"); Readiness.Err turns it into a transient *NotReadyError.
//
// # File identity and changes
//
// S3 reads send If-Match with the ETag the listing gave, every ranged read
// too: an object replaced after the listing answers 412, a *ChangedError
// (transient: roll back, list again, load the new files; never a mix of two
// versions). A read whose answer gives another size than the listing's (a
// store that serves new bytes before their new ETag) is one too. A local file's size and modification time are checked when it
// is opened and again when it has been read to its end; its SHA-256 is
// computed as it is read. The Listing's fingerprint uses ETags (local
// files: modification times), so it costs no read.
//
// # The COPY path, and why
//
// Every format ends in PostgreSQL's COPY ... FROM STDIN on the load's
// connection (pgconn's CopyFrom with an io.Reader), never in pgx's binary
// CopyFrom of Go values:
//
//   - CSV passes through untouched after its header: COPY (FORMAT csv) reads
//     the bytes psql \copy would send, so a CSV load costs what \copy costs.
//     The header is read and matched by idem (every difference listed at
//     once, which HEADER MATCH cannot), then the column list of the COPY
//     follows the file's order. Fill columns are appended to each record by
//     a scanner that splits records exactly as COPY does (a newline outside
//     quotes), at memory speed.
//   - NDJSON and Parquet are decoded in Go and re-encoded into COPY's text
//     format by a pull reader (no goroutine, no pipe): PostgreSQL converts
//     the text to each column's type with its own input functions, so any
//     target type works (numeric of any precision, enums, domains, jsonb,
//     arrays written as text) without a Go codec per type, NULL is \N
//     everywhere, and encoding a row is a few strconv appends into one
//     reused 64 KiB buffer. pgx's binary CopyFrom would need a []any per row
//     (an allocation per value), a describe round trip, registered types for
//     enums, and an exact Go type per column OID.
//
// NULLs: in CSV an unquoted empty field is NULL and a quoted one ("") the
// empty string, as in COPY's CSV format; in NDJSON null and an absent key
// are NULL; in Parquet a null value is NULL.
//
// Memory is bounded whatever the file's size: CSV and NDJSON read through a
// 256 KiB buffer; Parquet reads the footer from one 64 KiB read of the
// file's end, then one row group at a time, each column through a buffer of
// 16 MiB divided by the column count (64 KiB to 1 MiB), over ranged reads.
//
// # Schema check
//
// OpenStream checks a file before its first row and lists every
// difference in one *SchemaError (fatal, schema_mismatch):
//
//   - CSV: header names against the target columns, exactly: an unknown
//     column, a duplicate, a target column neither in the header nor in
//     Fill.
//   - NDJSON: the first object's keys; any later object's unknown key fails
//     the COPY with the same error. An absent key is NULL, so a target
//     column no object names is not reported.
//   - Parquet: the footer's flat schema (nested and repeated columns are
//     refused), names as for CSV, and types: a column that cannot hold the
//     values is refused (a boolean into a date, a float or a decimal with a
//     scale into an integer). Two conversions that would otherwise fail or
//     silently change meaning need Spec.Allow: an unsigned 64-bit integer
//     into smallint, integer or bigint (Uint64AsBigint; a value above the
//     column's range still fails, in PostgreSQL), and a timestamp without
//     isAdjustedToUTC, or INT96, or a date, into timestamptz
//     (NaiveTimestampsIn: the IANA zone its wall-clock times are in). A
//     UTC timestamp into timestamp without time zone loads its UTC wall
//     time. Text and unknown target types (enums, domains, arrays) take any
//     column as text and leave the judgement to PostgreSQL.
//
// Values PostgreSQL refuses (a bad integer, a NOT NULL) fail the COPY with
// its own *pgconn.PgError, wrapped with the file's URL, for the handlers
// to classify by SQLSTATE.
//
// # Errors
//
// Each error type says its fate with a Fatal() bool method, as the
// handlers' and the consumer's classifiers expect: *SchemaError,
// *MissingFilesError and *FormatError are fatal (with FatalReason);
// *ChangedError, *ManifestError and *NotReadyError are transient. Their
// text starts with a reason word (schema_mismatch, missing_files,
// file_changed, manifest, not_ready, bad_file) and names the file by its
// URL. Store errors wrap the SDK's with the operation and the object; the
// credentials are replaced by [redacted] wherever they would appear. No
// store error is io.EOF to errors.Is, even a connection the store closed
// ("...: EOF"): only a file's true end is.
//
// # Credentials
//
// S3 credentials come from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and,
// optionally, AWS_SESSION_TOKEN in idem's environment, and nowhere else: no
// shared config file, no instance metadata. S3Options holds the endpoint,
// region and addressing style only. Request and response checksums are
// computed only when an operation requires them, since the SDK's default
// CRC checksums break S3-compatible stores.
package files
