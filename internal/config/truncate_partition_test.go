package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTruncatePartitionIsForDeleteInsertOnly(t *testing.T) {
	t.Parallel()
	c := parseSpec(t)
	c.Datasets["orders"].TruncatePartition = true
	require.NoError(t, c.Validate())

	c.Datasets["customers"].TruncatePartition = true
	c.Datasets["events"].TruncatePartition = true
	err := c.Validate()
	require.Error(t, err)
	problems := err.(Problems)
	require.Len(t, problems, 2, "%v", problems)
	for _, p := range problems {
		require.Equal(t, "truncate_partition", p.Field)
		require.Contains(t, p.Message, "does not apply to strategy")
		require.Contains(t, p.Message, "only delete_insert replaces a whole partition")
	}

	cfg, err := Parse([]byte("pipeline: p\ndatasets:\n  orders:\n    strategy: delete_insert\n    target: a.b\n    partition_column: d\n    truncate_partition: true\n    source: SELECT * FROM s.t WHERE d = @partition\n"), nil)
	require.NoError(t, err)
	require.True(t, cfg.Datasets["orders"].TruncatePartition)
}
