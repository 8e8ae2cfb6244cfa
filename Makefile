# The two commands of the README, and a few helpers.
.PHONY: demo demo-down test venv lint stack-up stack-down clean

demo: venv  ## the pipeline through the embedded Airflow, locally on CPU, to the model's review
	.venv/bin/ffjobs airflow up
	.venv/bin/ffjobs airflow trigger --config local --inject-communicator-failure

demo-down:  ## stop the embedded Airflow that `make demo` started
	@if [ -x .venv/bin/ffjobs ]; then .venv/bin/ffjobs airflow down; else echo "nothing to stop (no .venv)"; fi

test:  ## install everything, start the local stack, lint, run all tests, tear down
	bash infra/test.sh

venv:
	bash infra/setup-venv.sh

lint: venv
	.venv/bin/ruff check . && .venv/bin/ruff format --check .

stack-up: venv
	bash infra/local/up.sh

stack-down:
	bash infra/local/down.sh

clean:
	rm -rf runs
