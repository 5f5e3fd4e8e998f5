-- wrk script: POST a unique workload per request, with an Idempotency-Key.
-- Same body and headers as ../shared/tools/tw_post.lua, but every request is a new workload:
-- that script keeps `tid` in a file-level local, so both wrk threads generate the same names
-- and about half of its requests are idempotent replays (200, no Raft write).
local counter = 0
local tid = 0
local run = 0
setup = function(thread)
  thread:set("thread_id", tid)
  tid = tid + 1
end
init = function(args)
  run = os.time()
  math.randomseed(run + (thread_id or 0) * 7919)
end
request = function()
  counter = counter + 1
  local name = string.format("bench-%d-%d-%d-%d", run, thread_id or 0, counter, math.random(1, 1e9))
  local body = '{"apiVersion":"tideway.dev/v1alpha1","kind":"Workload","metadata":{"name":"' .. name ..
    '"},"spec":{"queue":"default","class":"training","priorityClass":"normal","podSets":[{"name":"worker","count":1,"gpusPerPod":8,"flavor":"H100"}],"gang":{"minCount":1},"topology":{"required":"rack"},"runtimeEstimateSeconds":7200,"checkpoint":{"intervalSeconds":600}}}'
  return wrk.format("POST", "/v1/workloads", {["Content-Type"] = "application/json", ["Idempotency-Key"] = name}, body)
end
response = function(status, headers, body)
  if status ~= 201 then wrk.thread:stop() end
end
