package handlers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idem-data/idem/audit"
	"github.com/idem-data/idem/internal/checks"
	"github.com/idem-data/idem/internal/lineage"
	"github.com/idem-data/idem/strategies"
)

// Lineage is what the handler needs to write an attempt's OpenLineage run
// events (package lineage) into the outbox: START and COMPLETE in its
// load's transaction, START and FAIL with its failure. Handler.Lineage nil
// writes none.
type Lineage struct {
	// Namespace is the jobs' namespace; Producer the events' producer URI
	// ("" for the package's default).
	Namespace, Producer string
	// Warehouse names the target and source tables as OpenLineage does.
	Warehouse lineage.Warehouse
}

// lineageAttempt is attempt id of l as lineage sees it.
func (l *loading) lineageAttempt(id int64) lineage.Attempt {
	lc := l.h.Lineage
	parent, ignored := lineage.ParentFromAttributes(l.a.Attributes)
	for _, i := range ignored {
		l.log.Debug().Str("attribute", i.Attribute).Str("reason", i.Reason).Msg("lineage: parent attribute ignored")
	}
	return lineage.Attempt{
		Namespace: lc.Namespace, Producer: lc.Producer, Pipeline: l.a.Pipeline, Dataset: l.a.Dataset,
		AuditID: id, Number: l.a.Attempt, Partition: l.key, EventRunID: l.a.RunID, Parent: parent,
		Inputs: l.ds.Inputs, Output: lc.Warehouse.Dataset(l.ds.Target),
	}
}

// lineageFiles are the files the attempt read as lineage's input: the
// partition's prefix, by URL, and each file; nil when it read no file.
func (st *staging) lineageFiles() *lineage.FilesRead {
	if st == nil || st.listing == nil || len(st.listing.Files) == 0 {
		return nil
	}
	first := st.listing.Files[0]
	r := &lineage.FilesRead{
		Prefix:      strings.TrimSuffix(first.URL, first.Key) + st.listing.Prefix,
		Fingerprint: st.listing.Fingerprint,
		Files:       make([]lineage.IdemFile, len(st.listing.Files)),
	}
	for i, f := range st.listing.Files {
		r.Files[i] = lineage.IdemFile{URL: f.URL, Size: f.Size, ETag: f.ETag, VersionID: f.VersionID, SHA256: f.SHA256, Rows: f.Rows}
		if !f.ModTime.IsZero() {
			t := f.ModTime.UTC()
			r.Files[i].Modified = &t
		}
	}
	return r
}

// outputColumns are the target's columns as the load's plan knows them:
// read in its transaction, and again after a column it added or widened.
func outputColumns(cols []strategies.Column) []lineage.SchemaField {
	if len(cols) == 0 {
		return nil
	}
	out := make([]lineage.SchemaField, len(cols))
	for i, c := range cols {
		out[i] = lineage.SchemaField{Name: c.Name, Type: c.Type, OrdinalPosition: i + 1}
	}
	return out
}

// schemaChanges are the load's schema changes as idem_run lists them.
func schemaChanges(cs []strategies.SchemaChange) []lineage.SchemaChange {
	if len(cs) == 0 {
		return nil
	}
	out := make([]lineage.SchemaChange, len(cs))
	for i, c := range cs {
		out[i] = lineage.SchemaChange{Column: c.Column, Change: c.Change, Action: c.Action, OldType: c.OldType, NewType: c.NewType, Policy: c.Policy}
	}
	return out
}

// assertions are the checks' outcomes as OpenLineage data quality assertions.
func assertions(outs []checks.Outcome) []lineage.Assertion {
	as := make([]lineage.Assertion, 0, len(outs))
	for _, o := range outs {
		as = append(as, lineage.Assertion{Assertion: o.Kind, Success: o.Status != checks.StatusFail && o.Status != checks.StatusWarn,
			Severity: o.Severity, Name: o.Name, Expected: o.Threshold, Actual: fmt.Sprintf("%d failing of %d", o.Failing, o.Checked)})
	}
	return as
}

// queueComplete queues, in the load's transaction, attempt id's START and
// COMPLETE with rows written.
func (l *loading) queueComplete(b *pgx.Batch, id int64, rows int64) error {
	if l.h.Lineage == nil {
		return nil
	}
	a := l.lineageAttempt(id)
	// Queued after the load ran, so the plan holds the target's columns as
	// this transaction commits them, and what the load changed.
	a.OutputColumns = outputColumns(l.plan.TargetColumns())
	a.SchemaChanges = schemaChanges(l.plan.SchemaChanges())
	a.Files = l.stage.lineageFiles()
	start, err := a.Start(l.started).Marshal()
	if err != nil {
		return err
	}
	done, err := a.Complete(time.Now(), rows, assertions(l.checked)).Marshal()
	if err != nil {
		return err
	}
	audit.QueueEnqueueLineage(b, l.a.RunKey, id, start, done)
	return nil
}

// enqueueFail writes attempt id's START and FAIL, after its transaction
// rolled back, in a transaction of their own.
func (l *loading) enqueueFail(ctx context.Context, id int64, cause error) {
	if l.h.Lineage == nil {
		return
	}
	sb, ok := l.h.DB.(interface {
		SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	})
	if !ok {
		return
	}
	a := l.lineageAttempt(id)
	// The changes a refusal names, as idem.schema_changes records them; a
	// change the load made rolled back with it, so it is not listed.
	var refused *strategies.SchemaChangeError
	if errors.As(cause, &refused) {
		a.SchemaChanges = schemaChanges(refused.Changes)
	}
	start, err := a.Start(l.started).Marshal()
	if err == nil {
		var fail []byte
		if fail, err = a.Fail(time.Now(), cause.Error(), assertions(l.checked)).Marshal(); err == nil {
			err = audit.EnqueueLineage(ctx, sb, l.a.RunKey, id, start, fail)
		}
	}
	if err != nil {
		l.log.Error().Err(err).Msg("lineage: the attempt's FAIL event could not be written")
	}
}
