# The two commands the README promises.
.PHONY: demo test

demo:  ## run the demo control plane (SQLite, live sample traffic)
	scripts/demo.sh

test:  ## create the environments, install, run every test (SQLite and PostgreSQL)
	scripts/test.sh $(ARGS)
