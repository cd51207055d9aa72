# gpufleet.resilience: one entry point for setup, tests and the lab.
#   make lab    bring up the lab and run playbooks/one-click-slurm.yml against it
#   make test   install what the tests need and run all of them (what CI runs)
SHELL := /bin/bash
.ONESHELL:
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
CACHE_DIR ?= $(or $(GPUFLEET_CACHE_DIR),$(HOME)/.cache/gpufleet)
LAB_DIR ?= /var/tmp/gpufleet-lab
BIN := $(CURDIR)/$(VENV)/bin
# Debian packages the lab and the tests use: bindep.txt's Debian entries with the lab profile
# (tests/integration/test_environments.py holds the two equal).
DEBS := munge slurmctld slurmd slurm-client openssl gcc make git iproute2 procps prometheus prometheus-alertmanager \
  openjdk-17-jre-headless chromium cron nftables bpftrace numactl stress-ng

export PATH := $(BIN):$(PATH)
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/collections
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export GPUFLEET_CACHE_DIR := $(CACHE_DIR)
export PYTHONPATH := $(CURDIR)/collections

.PHONY: help setup venv link debs fake-nvml lab-binaries lint quick-lint test-names ruff imports ansible-lint sanity units \
        pytest test lab lab-status lab-down bench build clean

help:
	@echo "make lab        bring up the lab (Kubernetes + Slurm + simulated GPUs) and run one-click-slurm"
	@echo "make test       install what the tests need and run all of them (lint, sanity, units, pytest, molecule)"
	@echo "make lab-status per-node view of the lab;  make lab-down  stop every lab process by PID"
	@echo "make setup | lint | sanity | units | pytest | bench | build"

setup: venv link debs fake-nvml lab-binaries
# `make test` runs the steps that do not need each other at once: the Go builds (CPU-bound, minutes
# on a fresh machine) beside the venv and the Debian packages (network and disk) and, once the venv
# is there, lint. Each output line stays whole (-Oline).
PARALLEL_SETUP := $(MAKE) --no-print-directory -j4 -Oline

venv: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml constraints.txt tools/pyproject_deps.py
	$(PYTHON) -c 'import sys; assert sys.version_info[:2] == (3, 11), "Python 3.11 is required, found " + sys.version'
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check --upgrade pip
	$(VENV)/bin/python tools/pyproject_deps.py dev | $(VENV)/bin/pip install -q --disable-pip-version-check -c constraints.txt -r /dev/stdin
	touch $@

# The repo root is the collection; Ansible and pytest find it through this link.
link:
	mkdir -p collections/ansible_collections/gpufleet
	ln -sfn ../../.. collections/ansible_collections/gpufleet/resilience

debs:
	missing=$$(for p in $(DEBS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done)
	if [ -n "$$missing" ]; then
	  echo "installing Debian packages:" $$missing
	  apt-get update -qq
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null
	fi

# gcc and make come from the Debian packages.
fake-nvml: venv debs
	$(MAKE) --no-print-directory -C tools/fake-nvml VENV=$(CURDIR)/$(VENV)

# The lab's Kubernetes binaries and helm (the slinky backend and its tests), built from the Go
# module proxy into $(CACHE_DIR)/bin; a no-op for each binary already up to date.
lab-binaries:
	tools/build-go-binaries.sh etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm

lint: quick-lint ansible-lint
# The checks of seconds; `make test` runs ansible-lint (a minute) in the background of pytest instead
# (tests/integration/test_ansible_lint.py), where it overlaps the lab tests.
quick-lint: test-names ruff imports
# pytest (rootdir imports, no __init__.py) refuses two test files of one basename, but only when it
# collects, after every slower step: say so in a second instead.
test-names:
	@dups=$$(find tests -name 'test_*.py' -printf '%f\n' | sort | uniq -d); \
	if [ -n "$$dups" ]; then echo "test files sharing a basename (pytest cannot collect both): $$dups" >&2; exit 1; fi
ruff: venv link
	ruff check .
imports: venv link
	lint-imports
ansible-lint: venv link
	ansible-lint --offline

sanity: venv link
	tools/ansible-test.sh sanity
units: venv link
	tools/ansible-test.sh units

# pytest runs last so its summary line closes `make test`. Two xdist workers, each with a session lab:
# the first runs the unit tests and then most lab tests; the second the molecule scenarios,
# ansible-test sanity and units and ansible-lint (each reported as a test of its own), its lab's share
# of the lab tests and the tests that bring their own parts (docs/testing.md, "Two workers").
# PYTEST_WORKERS=0 runs them all in one process, on one lab.
PYTEST_WORKERS ?= 2
pytest: venv link fake-nvml
	pytest -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder --durations=30 tests

test:
	$(PARALLEL_SETUP) venv link debs fake-nvml lab-binaries quick-lint
	@date -u +"== set-up done at %FT%TZ"
	$(MAKE) --no-print-directory pytest

lab: setup
	ansible-playbook playbooks/one-click-slurm.yml
lab-status: venv link
	ansible-playbook playbooks/fleet-status.yml
lab-down: venv link
	ansible-playbook playbooks/lab-down.yml

bench: setup
	python bench/health_sensing.py
	python bench/lab.py

build: venv link
	ansible-galaxy collection build --force --output-path build/

clean:
	rm -rf build tests/output .pytest_cache .ruff_cache .hypothesis
