"""The performance benchmark and its helpers: the stub direct, the bare aiohttp floor and the
gateway, measured with wrk in one run (`python -m benchmarks.run`; docs/performance.md).

Each module has one job:

- `run`: the command line, the results file, the exit status;
- `suite`: the run's sequence, which proxy is loaded with which scenario in which order;
- `scenarios`: what is measured, each way through the gateway as one declaration, and the
  gateway configuration made of them;
- `answers`: what a complete, right answer is in each client's dialect;
- `procs`: starting, pinning and stopping the processes (nginx, the paced upstream, the floor,
  the gateway), and the tools they need;
- `measure`: one wrk run and what it cost the proxy (CPU, memory from /proc), and a row as the
  median of rounds between floor runs;
- `figures`: ratios to the floor and to the direct rows, the targets, the failures;
- `report`: the Markdown tables, printed, and written into a document only when asked;
- `stub`, `paced`, `floor`: the backends and the floor themselves; `recorded`: the answers in
  real servers' shapes, made from their recordings in tests/fixtures;
- `peers`: vllm-router and Portkey's gateway, installed when missing and measured beside it;
- `attacks`: hostile clients.
"""
