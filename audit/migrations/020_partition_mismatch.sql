-- idem schema v20: the partition check of a load that copies its rows
-- straight into the target (COPY … WHERE, no source query). COPY batches
-- its inserts only when its condition calls no volatile function, so the
-- check is declared IMMUTABLE: it is only ever reached for a row outside
-- the partition, and then it raises, as idem.outside_partition does for an
-- INSERT … SELECT.
CREATE FUNCTION idem.partition_mismatch(got anyelement, want text)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RAISE EXCEPTION 'source returned a row for partition % while loading partition %', got, want
        USING ERRCODE = '22023',
              HINT = 'filter the source with @partition, or keep the files of each partition under a prefix of their own';
END
$$;
