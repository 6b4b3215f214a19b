package lineage

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	taskRun = "01890a5d-ac96-774b-bcce-b302099a8057"
	dagRun  = "01890a5d-ac96-774b-bcce-b302099a8000"
)

func TestParentFromAttributes(t *testing.T) {
	t.Parallel()
	task := RunRef{"airflow", "shop_daily.load_orders", taskRun}
	dag := RunRef{"airflow", "shop_daily", dagRun}
	long := strings.Repeat("n", MaxRefChars+1)

	tests := []struct {
		name    string
		attrs   map[string]string
		want    *Parent
		ignored []string // "attribute: substring of the reason"
	}{
		{"none", nil, nil, nil},
		{"unrelated attributes", map[string]string{"team": "sales"}, nil, nil},
		{"airflow macros", map[string]string{
			AttrParentID:     "airflow/shop_daily.load_orders/" + taskRun,
			AttrRootParentID: "airflow/shop_daily/" + dagRun,
		}, &Parent{task, &dag}, nil},
		{"parts apart", map[string]string{
			AttrParentJobNamespace: "airflow", AttrParentJobName: "shop_daily.load_orders", AttrParentRunID: taskRun,
			AttrRootParentJobNamespace: "airflow", AttrRootParentJobName: "shop_daily", AttrRootParentRunID: dagRun,
		}, &Parent{task, &dag}, nil},
		{"parent only: no root is made up", map[string]string{AttrParentID: "airflow/shop_daily.load_orders/" + taskRun}, &Parent{task, nil}, nil},
		{"upper-case run id is normalised", map[string]string{AttrParentID: "airflow/shop_daily.load_orders/" + strings.ToUpper(taskRun)}, &Parent{task, nil}, nil},
		{"both forms agree", map[string]string{
			AttrParentID:           "airflow/shop_daily.load_orders/" + taskRun,
			AttrParentJobNamespace: "airflow", AttrParentJobName: "shop_daily.load_orders", AttrParentRunID: taskRun,
		}, &Parent{task, nil}, nil},
		{"parts apart win over the string", map[string]string{
			AttrParentID:           "other/job/" + dagRun,
			AttrParentJobNamespace: "airflow", AttrParentJobName: "shop_daily.load_orders", AttrParentRunID: taskRun,
		}, &Parent{task, nil}, []string{AttrParentID + ": differs from"}},
		{"a namespace with a slash, apart", map[string]string{
			AttrParentJobNamespace: "airflow://prod/eu", AttrParentJobName: "d.t", AttrParentRunID: taskRun,
		}, &Parent{RunRef{"airflow://prod/eu", "d.t", taskRun}, nil}, nil},
		{"a namespace with a slash, in one string", map[string]string{AttrParentID: "airflow://prod/d.t/" + taskRun}, nil,
			[]string{AttrParentID + ": want namespace/job_name/run_id, three parts separated by \"/\", found 5"}},
		{"run id not a uuid", map[string]string{AttrParentID: "airflow/d.t/scheduled__2026-11-28"}, nil,
			[]string{AttrParentID + `: the run id "scheduled__2026-11-28" is not a UUID`}},
		{"nil uuid", map[string]string{AttrParentRunID: "00000000-0000-0000-0000-000000000000", AttrParentJobNamespace: "a", AttrParentJobName: "b"}, nil,
			[]string{AttrParentRunID + ": the run id"}},
		{"empty job name", map[string]string{AttrParentID: "airflow//" + taskRun}, nil, []string{AttrParentID + ": the job name is empty"}},
		{"too long", map[string]string{AttrParentJobNamespace: long, AttrParentJobName: "b", AttrParentRunID: taskRun}, nil,
			[]string{AttrParentJobNamespace + ": the job namespace is 513 characters long; at most 512"}},
		{"control character", map[string]string{AttrParentID: "air\x00flow/d.t/" + taskRun}, nil, []string{AttrParentID + ": the job namespace holds a control character"}},
		{"invalid utf-8", map[string]string{AttrParentID: "air\xffflow/d.t/" + taskRun}, nil, []string{AttrParentID + ": the job namespace is not valid UTF-8"}},
		{"parts apart incomplete", map[string]string{AttrParentJobName: "d.t", AttrParentRunID: taskRun}, nil,
			[]string{AttrParentJobName + ": needs " + AttrParentJobNamespace + " as well"}},
		{"parts apart incomplete, string used", map[string]string{AttrParentRunID: dagRun, AttrParentID: "airflow/shop_daily.load_orders/" + taskRun}, &Parent{task, nil},
			[]string{AttrParentRunID + ": needs " + AttrParentJobNamespace + " and " + AttrParentJobName + " as well"}},
		{"root without parent", map[string]string{AttrRootParentID: "airflow/shop_daily/" + dagRun}, nil,
			[]string{AttrRootParentID + ": names a root run but no parent run"}},
		{"bad root, good parent", map[string]string{AttrParentID: "airflow/shop_daily.load_orders/" + taskRun, AttrRootParentID: "airflow/shop_daily"}, &Parent{task, nil},
			[]string{AttrRootParentID + ": want namespace/job_name/run_id"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ignored := ParentFromAttributes(tt.attrs)
			require.Equal(t, tt.want, got)
			require.Len(t, ignored, len(tt.ignored), "%v", ignored)
			for i, want := range tt.ignored {
				require.Contains(t, ignored[i].String(), want)
			}
		})
	}
}

func TestParentFacetValidates(t *testing.T) {
	t.Parallel()
	// Whatever passes ParentFromAttributes makes a facet the schema takes.
	a := sampleAttempt()
	a.Parent, _ = ParentFromAttributes(map[string]string{
		AttrParentJobNamespace: `quote" </script> 'x'`, AttrParentJobName: strings.Repeat("é", MaxRefChars), AttrParentRunID: strings.ToUpper(taskRun),
	})
	require.NotNil(t, a.Parent)
	body, err := a.Start(sampleTime).Marshal()
	require.NoError(t, err)
	validateEvent(t, body)
}
