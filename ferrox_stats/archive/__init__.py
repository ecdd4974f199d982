"""The archive: finished requests written behind the request path, and the queries over them.

| module | answers |
|---|---|
| ``rows`` | how a ``Record`` becomes a row and back, and which records can never be one |
| ``batch`` | how one batch is written (COPY on PostgreSQL, bulk insert elsewhere) |
| ``writer`` | the bounded write-behind queue and its background thread |
| ``queries`` | the QuerySet every reader shares: windows, filters, keyset pages, aggregates |
| ``retention`` | pruning rows past retention in bounded batches |
| ``export`` | streaming a range as CSV or JSONL in constant memory |
| ``paginator`` | how the admin pages the archive without counting all of it |
"""
