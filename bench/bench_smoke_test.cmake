# posenc_bench_smoke: runs `posenc-bench --quick --json` and checks that the document parses
# and has the fields the issue names. Usage: cmake -DBENCH=path/to/posenc-bench -P this.
execute_process(COMMAND ${BENCH} --quick --json
  OUTPUT_VARIABLE doc ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 100)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "posenc-bench --quick --json exited with ${rc}: ${err}")
endif()

# Fails unless member path ${ARGN} of ${json} exists.
function(require json)
  string(JSON value ERROR_VARIABLE error GET "${json}" ${ARGN})
  if(error)
    message(FATAL_ERROR "posenc-bench JSON: ${error}")
  endif()
endfunction()

require("${doc}" machine cpu_model)
require("${doc}" machine cores)
foreach(list kernels e2e shm)
  string(JSON count ERROR_VARIABLE error LENGTH "${doc}" ${list})
  if(error OR count EQUAL 0)
    message(FATAL_ERROR "posenc-bench JSON: '${list}' is missing or empty ${error}")
  endif()
endforeach()
foreach(field name isa shape dtype gbps roofline_gbps ratio)
  require("${doc}" kernels 0 ${field})
endforeach()
foreach(field rpc payload_bytes concurrency posenc_mbps echo_mbps ratio posenc_p99_ms
        echo_p99_ms)
  require("${doc}" e2e 0 ${field})
endforeach()
string(JSON ratio GET "${doc}" kernels 0 ratio)
if(NOT ratio GREATER 0)
  message(FATAL_ERROR "posenc-bench JSON: kernels[0].ratio is ${ratio}")
endif()
foreach(field rpc payload_bytes concurrency shm_mbps inline_mbps kernel_mbps speedup
        kernel_ratio shm_p50_ms inline_p50_ms)
  require("${doc}" shm 0 ${field})
endforeach()
message(STATUS "posenc-bench --quick --json: ok")
