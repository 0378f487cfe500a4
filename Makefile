# SPDX-License-Identifier: Apache-2.0
# spoa-ratelimit: one flat Makefile.
#
# Flags: C11 with the warnings from STYLE.md; -Werror always (a warning is a
# bug here). Dependencies come from Debian 12 packages: libev has no
# pkg-config file, so it is linked with -lev; the others use pkg-config.
# Every agent/*/*.c (main.c aside, the only file at agent/'s top) goes into
# a static library that the unit tests, the fuzz target and the benchmark
# link against, so adding a module or a test needs no edit here. agent/'s
# subfolders follow the data flow (README.md, "Layout"); each is on the
# include path, so a module includes "x.h" wherever x lives. BUILD may be overridden (helpers and asan
# builds use their own directory).

BUILD    ?= build
CC       ?= cc
PKG_CONFIG ?= pkg-config
PREFIX   ?= /usr/local
DESTDIR  ?=

WARN     = -Wall -Wextra -Werror -Wstrict-prototypes -Wwrite-strings \
           -Wformat=2 -Wshadow -Wpointer-arith -Wmissing-prototypes \
           -Wno-unused-parameter
override CFLAGS += -std=c11 -D_GNU_SOURCE -O2 -g -pthread $(WARN) -MMD -MP \
           $(shell $(PKG_CONFIG) --cflags hiredis yaml-0.1 2>/dev/null)
LIBS     = -lev $(shell $(PKG_CONFIG) --libs hiredis yaml-0.1 2>/dev/null) -lmsgpackc -lm -pthread
TEST_LIBS = $(shell $(PKG_CONFIG) --libs criterion 2>/dev/null)

AGENT_DIRS = $(sort $(dir $(wildcard agent/*/*.c agent/*/*.h)))
AGENT_INC  = $(patsubst %/,-I%,$(AGENT_DIRS))
AGENT_HDRS = $(wildcard agent/*/*.h)
AGENT_SRCS = $(wildcard agent/*/*.c)
AGENT_OBJS = $(patsubst agent/%.c,$(BUILD)/agent/%.o,$(AGENT_SRCS)) $(BUILD)/agent/scripts.o
UNIT_SRCS  = $(wildcard tests/unit/test_*.c)
UNIT_BINS  = $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))
ITEST_SRCS = $(wildcard tests/integration/test_*.c)
ITEST_BINS = $(patsubst tests/integration/%.c,$(BUILD)/itests/%,$(ITEST_SRCS))
TOOL_SRCS  = $(wildcard tests/tools/*.c)
TOOL_BINS  = $(patsubst tests/tools/%.c,$(BUILD)/tools/%,$(TOOL_SRCS))
LUA_SRCS   = $(sort $(wildcard agent/store/lua/*.lua))
LIB        = $(BUILD)/libagent.a
BIN        = $(BUILD)/spoa-ratelimit

.PHONY: all deps run test unit integration e2e fuzz fuzz-short asan bench bench-cluster bench-reserve \
        install clean check-policies check-layers tools format
all: $(BIN) $(TOOL_BINS)

$(BUILD)/agent/%.o: agent/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AGENT_INC) -c -o $@ $<

# The Lua scripts are compiled into the binary as C strings (scripts.c).
$(BUILD)/agent/scripts.c: $(LUA_SRCS) scripts/embed-lua.sh
	@mkdir -p $(dir $@)
	sh scripts/embed-lua.sh $(LUA_SRCS) > $@.tmp && mv $@.tmp $@
$(BUILD)/agent/scripts.o: $(BUILD)/agent/scripts.c
	$(CC) $(CFLAGS) $(AGENT_INC) -c -o $@ $<

$(LIB): $(AGENT_OBJS)
	@rm -f $@
	ar rcs $@ $^

$(BIN): $(BUILD)/agent/main.o $(LIB)
	$(CC) $(CFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/tests/%: tests/unit/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AGENT_INC) -o $@ $< $(LIB) $(LIBS) $(TEST_LIBS)

# Criterion suites that need a live redis-server; tests/integration/*.sh
# start one and run them with REDIS_PORT set.
# tests/unit is on their path for the helpers they share with the unit
# suites (lim_mk.h).
$(BUILD)/itests/%: tests/integration/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AGENT_INC) -Itests/unit -o $@ $< $(LIB) $(LIBS) $(TEST_LIBS)

$(BUILD)/tools/%: tests/tools/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AGENT_INC) -o $@ $< $(LIB) $(LIBS)

tools: $(TOOL_BINS)

# make bench's measurements: msgpack as the script's batch format, and
# contention in the local tier
$(BUILD)/bench/batchfmt $(BUILD)/bench/localbench: $(BUILD)/bench/%: \
    tests/bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AGENT_INC) -o $@ $< $(LIB) $(LIBS)

# ---- dependencies (Debian 12) ------------------------------------------
deps:
	@sh scripts/deps.sh

# ---- demo --------------------------------------------------------------
run: deps all
	sh scripts/demo.sh

# ---- tests -------------------------------------------------------------
# Everything the suites run is built first, on every core: serial, the
# build took a seventh of .ci/run's 20 minutes.
JOBS ?= $(shell nproc 2>/dev/null || echo 1)
test: deps
	$(MAKE) -j$(JOBS) all $(UNIT_BINS) $(ITEST_BINS) $(FUZZ_BINS)
	$(MAKE) check-layers
	$(MAKE) unit
	$(MAKE) check-policies
	$(MAKE) integration
	$(MAKE) e2e
	$(MAKE) fuzz-short
	@echo "all suites passed"

unit: $(UNIT_BINS)
	@sh scripts/run-unit.sh $(UNIT_BINS)

# Includes against the declared layers, and no include cycle
# (scripts/layers.txt).
check-layers:
	@sh scripts/check-layers.sh agent scripts/layers.txt

check-policies: $(BIN)
	@sh scripts/check-policies.sh $(BIN)

# Two integration scripts at a time: they claim their own ports and
# spend most of their time waiting on timeouts, so two lanes take .ci/run's
# integration step from 11 minutes to about 6 on 2 cores.
ITEST_LANES ?= 2
integration: $(BIN) $(TOOL_BINS) $(ITEST_BINS)
	@BUILD=$(BUILD) LANES=$(ITEST_LANES) bash scripts/run-suite.sh tests/integration

e2e: $(BIN) $(TOOL_BINS)
	@BUILD=$(BUILD) bash scripts/run-suite.sh tests/e2e

# libFuzzer needs clang. The targets link the pure modules only (no libev,
# no hiredis): what turns untrusted bytes into decisions, and the script's
# reply from Redis (results.c).
FUZZ_SRCS = $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS = $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRCS))
FUZZ_MODS = spop policy policy_parse yamlkw keys cidr policy_allow override decide \
	util log lim_common \
	lim_gcra lim_log lim_window lim_block httpd metrics results store_url \
	adminreq topk topview
FUZZ_LIB_SRCS = $(foreach m,$(FUZZ_MODS),$(wildcard agent/*/$(m).c))
$(BUILD)/fuzz/%: tests/fuzz/%.c $(FUZZ_LIB_SRCS) $(AGENT_HDRS)
	@mkdir -p $(dir $@)
	clang -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined \
	      $(AGENT_INC) -o $@ $< $(FUZZ_LIB_SRCS) \
	      $(shell $(PKG_CONFIG) --libs yaml-0.1) -lev -lm -pthread
fuzz: $(FUZZ_BINS)
	@echo "run: $(FUZZ_BINS) -max_total_time=600"
fuzz-short: $(FUZZ_BINS)
	@sh scripts/run-fuzz.sh $(BUILD) $(FUZZ_BINS)

asan:
	$(MAKE) BUILD=build-asan CC=clang \
	    CFLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
	    ITEST_LANES=1 all unit integration

bench: deps all $(BUILD)/bench/batchfmt $(BUILD)/bench/localbench
	@BUILD=$(BUILD) sh tests/bench/run.sh
	@BUILD=$(BUILD) bash tests/bench/reserve.sh

# Redis CPU per reservation and per settle against a plain check
bench-reserve: all
	@BUILD=$(BUILD) bash tests/bench/reserve.sh

# Redis Cluster, 1 and 3 shards (run.sh runs it too, at its end)
bench-cluster: all
	@BUILD=$(BUILD) sh tests/bench/cluster.sh

install: $(BIN)
	sh scripts/install.sh "$(DESTDIR)" "$(PREFIX)" "$(BIN)"

clean:
	rm -rf build build-*

-include $(wildcard $(BUILD)/agent/*.d $(BUILD)/agent/*/*.d $(BUILD)/tests/*.d $(BUILD)/tools/*.d $(BUILD)/itests/*.d)

# The house style (.clang-format, STYLE.md): run before committing C.
format:
	find agent tests -name '*.[ch]' | xargs clang-format -i
