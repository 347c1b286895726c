#!/bin/sh
# Run by the postgres image once, when it initialises an empty data volume
# (docker-entrypoint-initdb.d). POSTGRES_DB (the Temporal database) already exists;
# the ledger gets its own role and database so that neither service can touch the
# other's tables.
set -eu

psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
    -v ledger_user="$LEDGER_DB_USER" \
    -v ledger_password="$LEDGER_DB_PASSWORD" \
    -v ledger_db="$LEDGER_DB_NAME" <<'SQL'
CREATE ROLE :"ledger_user" LOGIN PASSWORD :'ledger_password';
CREATE DATABASE :"ledger_db" OWNER :"ledger_user";
SQL
