package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/idem-data/idem/audit"
)

// auditSchemaCmd lists the schema changes loads met (on_schema_change).
func auditSchemaCmd(e *env) *cobra.Command {
	var asJSON bool
	var partition string
	var limit int
	c := &cobra.Command{
		Use:   "schema DATASET",
		Short: "The schema changes a dataset's loads met, newest first: column, types, policy, what was done",
		Long: `schema lists, newest first, every difference between a dataset's source
columns and its target's that a load met and recorded: a new source column
(added, ignored or refused), a retyped one (widened or refused), a column the
source no longer returns (kept), with the target's and the source's types,
the on_schema_change in force, the ALTER TABLE run or that would fix it, and
the attempt (run_id, partition) that met it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, pool, err := e.datasetDB(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer pool.Close()
			rows, err := audit.SchemaChanges(cmd.Context(), pool, cfg.Pipeline, args[0], partition, limit)
			if err != nil {
				return err
			}
			if asJSON {
				if rows == nil {
					rows = []audit.SchemaChangeRow{}
				}
				enc := json.NewEncoder(e.out)
				enc.SetIndent("", "  ")
				return enc.Encode(rows)
			}
			if len(rows) == 0 {
				_, err := fmt.Fprintf(e.out, "no schema change recorded for %s (on_schema_change: %s)\n", args[0], cfg.Datasets[args[0]].SchemaPolicy())
				return err
			}
			w := tabwriter.NewWriter(e.out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "AT\tPARTITION\tRUN_ID\tCOLUMN\tCHANGE\tTARGET TYPE\tSOURCE TYPE\tPOLICY\tACTION\tDDL / REASON")
			for _, r := range rows {
				how := r.DDL
				if r.Reason != "" {
					how = r.Reason
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.At.Format("2006-01-02 15:04:05Z"), r.Partition, r.RunID,
					r.Column, r.Change, dash(r.OldType), dash(r.NewType), r.Policy, r.Action, how)
			}
			return w.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	c.Flags().StringVar(&partition, "partition", "", "only this partition's")
	c.Flags().IntVar(&limit, "limit", 100, "at most this many, newest first")
	return c
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
