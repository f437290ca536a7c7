-- index_resolver_bindings: every name a module binds by import (sorted by the caller).
SELECT b.file_id, b.name, b.target
FROM recon.binding b;
