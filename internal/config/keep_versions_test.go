package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// keep_versions names the partition's rows by partition_column, for every
// strategy: merge takes one only with it.
func TestKeepVersionsNeedsPartitionColumn(t *testing.T) {
	t.Parallel()
	c := parseSpec(t)
	c.Datasets["orders"].KeepVersions = 3
	require.NoError(t, c.Validate())

	c.Datasets["customers"].KeepVersions = 2 // merge, no partition_column
	c.Datasets["events"].KeepVersions = MaxKeepVersions + 1
	err := c.Validate()
	require.Error(t, err)
	problems := err.(Problems)
	require.Len(t, problems, 2, "%v", problems)
	for _, p := range problems {
		require.Equal(t, "keep_versions", p.Field)
	}
	require.Contains(t, err.Error(), "needs partition_column")
	require.Contains(t, err.Error(), "up to 100")

	c.Datasets["customers"].PartitionColumn = "updated_on"
	c.Datasets["events"].KeepVersions = 0
	require.NoError(t, c.Validate())
	c.Datasets["customers"].KeepVersions = 0
	err = c.Validate()
	require.ErrorContains(t, err, "partition_column")
}
