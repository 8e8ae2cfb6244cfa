# The two commands of the README, and a few helpers.
.PHONY: demo test venv lint stack-up stack-down clean

demo: venv  ## run the whole pipeline locally on CPU with the embedded default (configs/local.yaml)
	.venv/bin/ffjobs run

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
