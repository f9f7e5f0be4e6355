"""Everything needed to run a whole cluster on one machine (`durachat-local`, `make run`)."""
