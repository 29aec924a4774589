# SPDX-License-Identifier: MIT
# Thin wrapper over CMake (see CMakeLists.txt). The README's two commands:
#   make demo   install missing packages, build, run the demo
#   make test   install missing packages, build, run every test (ctest)
BUILD      ?= build
ASAN_BUILD ?= build-asan
JOBS       ?= $(shell nproc)
CTEST_JOBS ?= 2
CMAKE_ARGS ?=
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 30
# -Werror in developer builds and CI; packagers configure CMake directly (MT_WERROR defaults OFF)
MT_WERROR  ?= ON

.PHONY: all deps configure build build-types test asan fuzz demo cluster cluster-stop format \
	format-check bench clean install deb

all: build

deps:
	@deploy/install-deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DMT_WERROR=$(MT_WERROR) $(CMAKE_ARGS)

# a build tree configured before MT_WERROR existed (or with the other value) is reconfigured
configure: $(BUILD)/CMakeCache.txt
	@grep -qx 'MT_WERROR:BOOL=$(MT_WERROR)' $(BUILD)/CMakeCache.txt || \
	    cmake -S . -B $(BUILD) -DMT_WERROR=$(MT_WERROR) $(CMAKE_ARGS)

build: deps configure
	cmake --build $(BUILD) -j $(JOBS)

# Release, RelWithDebInfo, Debug and a dpkg-buildflags build each compile with -Werror
# (programs and libraries only; a fresh tree each under a temp dir; tests/build_types.sh)
BUILD_TYPES ?= Release RelWithDebInfo Debug debian
build-types: deps
	JOBS=$(JOBS) tests/build_types.sh $(BUILD_TYPES)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(CTEST_JOBS)

asan: deps
	cmake -S . -B $(ASAN_BUILD) -DMT_SANITIZE=address,undefined -DCMAKE_BUILD_TYPE=Debug \
	    -DMT_WERROR=$(MT_WERROR) $(CMAKE_ARGS)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 MT_SANITIZED=1 \
	    ctest --output-on-failure -j $(CTEST_JOBS)

# libFuzzer (clang): every tests/fuzz/fuzz_*.c for FUZZ_SECONDS each (tests/fuzz/run_fuzz.sh)
fuzz:
	@MT_EXTRA_PACKAGES="clang libclang-rt-14-dev" deploy/install-deps.sh
	cmake -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DMT_FUZZ=ON -DMT_WERROR=$(MT_WERROR) \
	    $(CMAKE_ARGS)
	tests/fuzz/run_fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(JOBS)

demo: build
	deploy/demo.sh $(BUILD)

# a local coordinator + 2 workers that stay up (the README's quickstart; deploy/cluster.sh)
cluster: build
	deploy/cluster.sh start $(BUILD)

cluster-stop:
	deploy/cluster.sh stop $(BUILD)

install: build
	cmake --install $(BUILD)

# Debian packages meshtrain, meshtrain-coordinator, meshtrain-worker in $(DEB_OUT), built as a
# packager would: Release, prefix /usr, dpkg-buildflags, -Werror off (packaging/deb/build-debs.sh)
DEB_BUILD ?= build-deb
DEB_OUT   ?= dist
deb: deps
	CFLAGS="$$(dpkg-buildflags --get CFLAGS) $$(dpkg-buildflags --get CPPFLAGS)" \
	    LDFLAGS="$$(dpkg-buildflags --get LDFLAGS)" \
	    cmake -S . -B $(DEB_BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
	    -DMT_WERROR=OFF $(CMAKE_ARGS)
	cmake --build $(DEB_BUILD) -j $(JOBS) --target meshtrain meshtrain-coordinator meshtrain-worker \
	    mt_help
	packaging/deb/build-debs.sh $(DEB_BUILD) $(DEB_OUT)

# every bench/*.sh that takes [BUILD_DIR] alone: not lib.sh (sourced by the others), the A/B
# scripts and seq_balance.sh (they take two builds), job_cpu.sh (a job), nor char_lm_convergence.sh (hours)
BENCH_SKIP := lib.sh ab_e2e.sh ab_instr.sh ab_jobs.sh ab_local.sh seq_balance.sh job_cpu.sh \
	char_lm_convergence.sh
bench: build
	@for b in bench/*.sh; do case " $(BENCH_SKIP) " in *" $${b#bench/} "*) continue ;; esac; \
	    echo "== $$b"; bash $$b $(BUILD) || exit 1; done

format:
	@git ls-files --cached --others --exclude-standard '*.c' '*.h' | xargs -r clang-format -i

format-check:
	@bad=$$(git ls-files --cached --others --exclude-standard '*.c' '*.h' | xargs -r clang-format --dry-run --Werror 2>&1 | grep -c 'error:' || true); \
	if [ "$$bad" != "0" ]; then \
	    git ls-files --cached --others --exclude-standard '*.c' '*.h' | xargs -r clang-format --dry-run --Werror; exit 1; \
	fi; echo "format-check: clean"

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD) $(DEB_BUILD)
