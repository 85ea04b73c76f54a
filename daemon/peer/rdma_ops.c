/*
 * rdma_ops.c - rdma_ops_real: the RDMA transport's table (rdma_ops.h)
 * filled with libibverbs and librdmacm.  Most entries are the library
 * functions themselves; the data-path calls that verbs.h defines as
 * inline functions or macros (ibv_poll_cq, ibv_post_send,
 * ibv_req_notify_cq, ibv_query_port, ibv_reg_mr) get a wrapper here.
 */
#include "rdma_ops.h"

static int real_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
    return ibv_query_port(ctx, port, attr);
}

static struct ibv_mr *real_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    return ibv_reg_mr(pd, addr, len, access);
}

static int real_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    return ibv_req_notify_cq(cq, solicited_only);
}

static int real_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    return ibv_poll_cq(cq, n, wc);
}

static int real_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    return ibv_post_send(qp, wr, bad);
}

const rdma_ops rdma_ops_real = {
    .name = "verbs",
    .create_event_channel = rdma_create_event_channel,
    .destroy_event_channel = rdma_destroy_event_channel,
    .create_id = rdma_create_id,
    .destroy_id = rdma_destroy_id,
    .bind_addr = rdma_bind_addr,
    .listen = rdma_listen,
    .resolve_addr = rdma_resolve_addr,
    .resolve_route = rdma_resolve_route,
    .connect = rdma_connect,
    .accept = rdma_accept,
    .reject = rdma_reject,
    .disconnect = rdma_disconnect,
    .create_qp = rdma_create_qp,
    .destroy_qp = rdma_destroy_qp,
    .get_cm_event = rdma_get_cm_event,
    .ack_cm_event = rdma_ack_cm_event,
    .event_str = rdma_event_str,
    .get_device_list = ibv_get_device_list,
    .free_device_list = ibv_free_device_list,
    .get_device_name = ibv_get_device_name,
    .open_device = ibv_open_device,
    .close_device = ibv_close_device,
    .query_device = ibv_query_device,
    .query_port = real_query_port,
    .alloc_pd = ibv_alloc_pd,
    .dealloc_pd = ibv_dealloc_pd,
    .reg_mr = real_reg_mr,
    .dereg_mr = ibv_dereg_mr,
    .create_comp_channel = ibv_create_comp_channel,
    .destroy_comp_channel = ibv_destroy_comp_channel,
    .create_cq = ibv_create_cq,
    .destroy_cq = ibv_destroy_cq,
    .req_notify_cq = real_req_notify_cq,
    .get_cq_event = ibv_get_cq_event,
    .ack_cq_events = ibv_ack_cq_events,
    .poll_cq = real_poll_cq,
    .post_send = real_post_send,
    .wc_status_str = ibv_wc_status_str,
};
