/* OrtEp: GetCapability (snapshot -> claim -> clusters -> AddNodesToFuse) and Compile (snapshot of
 * each fused graph -> plan). The shell never names an op: claiming and lowering live in src/ops. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep/ep_internal.h"
#include "graph/snapshot.h"
#include "partition/partition.h"

static ep_instance *ep_of(const OrtEp *e) { return (ep_instance *)e; }

static const char *ORT_API_CALL ep_get_name(const OrtEp *e) { return EP_NAME; }

static void write_report(ep_instance *ep, const ir_graph *g, const partition *p, const char *graph_name) {
  FILE *f = ep_report_open(&ep->opts);
  if (!f) return;
  char title[512];
  snprintf(title, sizeof title, "graph '%s' (GetCapability call %d)", graph_name ? graph_name : "", ep->capability_calls);
  partition_write_report(g, p, title, f);
  ep_report_close(f);
}

/* Run statistics of one cluster, written when the session releases it. */
static void write_run_report(ep_instance *ep, plan *p) {
  FILE *f = ep_report_open(&ep->opts);
  if (!f) return;
  plan_stats st;
  plan_get_stats(p, &st);
  fprintf(f,
          "MLXExecutionProvider run report: cluster '%s' (%d nodes): runs=%llu sig_hits=%llu sig_misses=%llu "
          "evictions=%llu traces=%llu fusion_traces=%llu trace_failures=%llu unexpected_trace_failures=%llu compiled_runs=%llu eager_runs=%llu host_reads=%llu padded_runs=%llu "
          "device_inputs=%llu host_inputs=%llu device_outputs=%llu host_outputs=%llu inplace_outputs=%llu "
          "program_copies=%llu computed_ahead=%llu first_run_ms=%.1f "
          "trace_runs_ms=%.1f bind_ms=%.1f graph_ms=%.1f eval_ms=%.1f copy_ms=%.1f eager_ops=%llu "
          "program_ops=%llu checks=%llu body_traces=%llu body_replays=%llu body_trace_failures=%llu\n",
          plan_name(p), plan_num_nodes(p), (unsigned long long)st.runs, (unsigned long long)st.sig_hits,
          (unsigned long long)st.sig_misses, (unsigned long long)st.evictions, (unsigned long long)st.traces,
          (unsigned long long)st.fusion_traces,          (unsigned long long)st.trace_failures, (unsigned long long)st.unexpected_trace_failures,
          (unsigned long long)st.compiled_runs, (unsigned long long)st.eager_runs, (unsigned long long)st.host_reads,
          (unsigned long long)st.padded_runs, (unsigned long long)st.device_inputs, (unsigned long long)st.host_inputs,
          (unsigned long long)st.device_outputs, (unsigned long long)st.host_outputs,
          (unsigned long long)st.inplace_outputs, (unsigned long long)st.program_copies,
          (unsigned long long)st.computed_ahead, st.first_run_us / 1e3,
          st.trace_run_us / 1e3, st.bind_us / 1e3, st.graph_us / 1e3, st.eval_us / 1e3, st.copy_us / 1e3,
          (unsigned long long)st.eager_ops, (unsigned long long)st.program_ops, (unsigned long long)st.checks,
          (unsigned long long)st.body_traces,
          (unsigned long long)st.body_replays, (unsigned long long)st.body_trace_failures);
  uint64_t compiled = 0, from_disk = 0;
  double compile_ms = 0.0;
  mlxb_kernel_cache_stats(&compiled, &from_disk, &compile_ms);
  if (compiled || from_disk)
    fprintf(f, "  the EP's CUDA kernels in this process: compiled=%llu compile_ms=%.1f from_disk=%llu\n",
            (unsigned long long)compiled, compile_ms, (unsigned long long)from_disk);
  char padded[1024], trace_error[256];
  plan_describe_buckets(p, padded, sizeof padded);
  if (*padded) fprintf(f, "  decode buckets pad: %s\n", padded);
  plan_first_trace_failure(p, trace_error, sizeof trace_error);
  if (*trace_error) fprintf(f, "  first trace failure (that signature runs eagerly): %s\n", trace_error);
  ep_report_close(f);
}

/* Nodes ORT already gave to another EP must not be claimed again (GetCapability is re-run). */
static int mark_assigned(const ep_runtime *rt, const OrtNode *const *nodes, size_t n, bool *assigned, diag *d) {
  for (size_t i = 0; i < n; i++) {
    const char *ep_name = NULL;
    OrtStatus *st = rt->api->Node_GetEpName(nodes[i], &ep_name);
    if (st) return ir_ort_status_to_diag(rt->api, st, d, "Node_GetEpName");
    assigned[i] = ep_name && *ep_name && strcmp(ep_name, EP_NAME);
  }
  return 0;
}

static OrtStatus *add_clusters(ep_instance *ep, const partition *p, const OrtNode *const *nodes,
                               OrtEpGraphSupportInfo *info) {
  const ep_runtime *rt = &ep->factory->rt;
  const OrtNode **members = malloc(sizeof *members * ((size_t)p->n_nodes + 1));
  if (!members) return ep_status_msg(rt, ORT_FAIL, EP_NAME ": out of memory");
  OrtNodeFusionOptions fusion = {0};
  fusion.ort_version_supported = rt->api_version;
  fusion.drop_constant_initializers = true; /* Compile copies constants into MLX */
  OrtStatus *st = NULL;
  for (int k = 0; k < p->n_clusters && !st; k++) {
    size_t count = 0;
    for (int i = 0; i < p->n_nodes; i++)
      if (p->cluster_of[i] == k) members[count++] = nodes[i];
    if (count) st = rt->ep_api->EpGraphSupportInfo_AddNodesToFuse(info, members, count, &fusion);
  }
  free(members);
  return st;
}

/* What GetCapability decided, through ORT's logger: a summary (INFO) and each declined node with
 * its reason (VERBOSE), so the claim report's facts reach applications that read ORT's logs. */
static void log_claims(ep_instance *ep, const ir_graph *g, const partition *p, const char *graph_name) {
  const ep_runtime *rt = &ep->factory->rt;
  int claimed = 0;
  for (int i = 0; i < p->n_nodes; i++) claimed += p->defs[i] != NULL;
  ep_log(rt, ep->logger, ORT_LOGGING_LEVEL_INFO, "graph '%s': %d of %d nodes claimed, %d cluster(s)",
         graph_name ? graph_name : "", claimed, p->n_nodes, p->n_clusters);
  for (int i = 0; i < p->n_nodes; i++)
    if (!p->defs[i])
      ep_log(rt, ep->logger, ORT_LOGGING_LEVEL_VERBOSE, "declined node '%s' (%s): %s", g->nodes[i].name,
             g->nodes[i].op_type, p->reasons[i] ? p->reasons[i] : "");
}

static OrtStatus *ORT_API_CALL ep_get_capability(OrtEp *this_ptr, const OrtGraph *graph, OrtEpGraphSupportInfo *info) {
  ep_instance *ep = ep_of(this_ptr);
  const ep_runtime *rt = &ep->factory->rt;
  diag d;
  diag_init(&d);
  ir_graph *g = NULL;
  partition *p = NULL;
  const OrtNode **nodes = NULL;
  bool *assigned = NULL;
  OrtStatus *st = NULL;
  ep->capability_calls++;
  if (ir_graph_from_ort(rt->api, graph, &g, &d)) goto fail;
  nodes = calloc((size_t)g->n_nodes + 1, sizeof *nodes);
  assigned = calloc((size_t)g->n_nodes + 1, sizeof *assigned);
  if (!nodes || !assigned) {
    diag_fail(&d, "out of memory");
    goto fail;
  }
  if (g->n_nodes && (st = rt->api->Graph_GetNodes(graph, nodes, (size_t)g->n_nodes))) goto done;
  if (mark_assigned(rt, nodes, (size_t)g->n_nodes, assigned, &d)) goto fail;
  if (partition_graph(g, ep->opts.device, assigned, &p, &d)) goto fail;
  const char *graph_name = NULL;
  OrtStatus *name_st = rt->api->Graph_GetName(graph, &graph_name);
  if (name_st) rt->api->ReleaseStatus(name_st);
  write_report(ep, g, p, graph_name);
  log_claims(ep, g, p, graph_name);
  st = add_clusters(ep, p, nodes, info);
  goto done;
fail:
  st = ep_status_from_diag(rt, &d);
done:
  partition_free(p);
  ir_graph_free(g);
  free(nodes);
  free(assigned);
  return st;
}

static OrtStatus *compile_one(ep_instance *ep, const OrtGraph *graph, const OrtNode *fused, OrtNodeComputeInfo **out) {
  const ep_runtime *rt = &ep->factory->rt;
  diag d;
  diag_init(&d);
  const char *name = NULL;
  OrtStatus *st = rt->api->Node_GetName(fused, &name);
  if (st) return st;
  ir_graph *g = NULL;
  plan *p = NULL;
  plan_config cfg = {ep->opts.device, ep->opts.compile, ep->opts.cache_size, ep->opts.decode_bucket, ep->trace};
  if (ir_graph_from_ort(rt->api, graph, &g, &d) || plan_create(g, &cfg, name, &p, &d)) {
    diag_prefix(&d, "compiling '%s': ", name ? name : "");
    return ep_status_from_diag(rt, &d);
  }
  st = ep_compute_create(ep, p, out);
  if (st) plan_free(p);
  return st;
}

static void ORT_API_CALL ep_release_node_compute_infos(OrtEp *this_ptr, OrtNodeComputeInfo **infos, size_t n) {
  for (size_t i = 0; i < n; i++) {
    ep_compute *c = (ep_compute *)infos[i];
    if (!c) continue;
    if (c->plan) write_run_report(ep_of(this_ptr), c->plan);
    plan_free(c->plan);
    free(c);
  }
}

static OrtStatus *ORT_API_CALL ep_compile(OrtEp *this_ptr, const OrtGraph **graphs, const OrtNode **fused_nodes,
                                          size_t count, OrtNodeComputeInfo **infos, OrtNode **ep_context_nodes) {
  ep_instance *ep = ep_of(this_ptr);
  for (size_t i = 0; i < count; i++) infos[i] = NULL;
  for (size_t i = 0; i < count; i++) {
    OrtStatus *st = compile_one(ep, graphs[i], fused_nodes[i], &infos[i]);
    if (st) {
      ep_release_node_compute_infos(this_ptr, infos, i);
      for (size_t k = 0; k < count; k++) infos[k] = NULL;
      return st;
    }
  }
  return NULL;
}

static OrtStatus *ORT_API_CALL ep_is_concurrent_run_supported(OrtEp *this_ptr, bool *is_supported) {
  *is_supported = true; /* plans are immutable; each Run builds and evaluates on its own thread */
  return NULL;
}

void ep_instance_init(ep_instance *ep, ep_factory *f) {
  ep->factory = f;
  OrtEp *b = &ep->base;
  b->ort_version_supported = f->rt.api_version;
  b->GetName = ep_get_name;
  b->GetCapability = ep_get_capability;
  b->Compile = ep_compile;
  b->ReleaseNodeComputeInfos = ep_release_node_compute_infos;
  if (f->rt.api_version >= 24) b->IsConcurrentRunSupported = ep_is_concurrent_run_supported;
}
