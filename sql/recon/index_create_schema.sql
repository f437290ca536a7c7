-- index_create_schema: the recon schema on a database server (SQLite attaches the file as
-- schema recon instead).
CREATE SCHEMA IF NOT EXISTS recon;
