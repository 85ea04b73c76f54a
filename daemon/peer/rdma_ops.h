/*
 * rdma_ops.h - the one table through which the RDMA transport (rdma.c)
 * makes every libibverbs and librdmacm call.
 *
 * rdma_ops_real (rdma_ops.c) is the libraries themselves; the entries keep
 * their signatures and their error conventions (rdma_cm calls: -1 and
 * errno; ibv_post_send, ibv_req_notify_cq, ibv_dereg_mr and friends: an
 * errno value; ibv_poll_cq: the count or negative), so rdma.c reads as
 * plain verbs code.  A stand-in (tests/check_rdma.c) fills the same
 * structures (struct rdma_cm_id, ibv_mr, ibv_wc...) itself, with pollable
 * descriptors in its event and completion channels, and decides which
 * completion each posted READ gets.
 *
 * What rdma.c relies on from whichever table: the event channel's and the
 * completion channel's fd are pollable and may be made non-blocking, after
 * which get_cm_event and get_cq_event fail with EAGAIN when nothing is
 * pending; an rdma_cm_id's verbs, qp, port_num, context and route fields
 * are filled as librdmacm fills them.
 *
 * Threads: whatever the libraries allow (they are thread-safe); a stand-in
 * must be too, since a server's listener thread runs beside its callers.
 */
#ifndef GR_RDMA_OPS_H
#define GR_RDMA_OPS_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

typedef struct rdma_ops {
    const char *name;           /* "verbs", or the stand-in's name (for logs) */

    /* rdma_cm (librdmacm) */
    struct rdma_event_channel *(*create_event_channel)(void);
    void (*destroy_event_channel)(struct rdma_event_channel *ch);
    int (*create_id)(struct rdma_event_channel *ch, struct rdma_cm_id **id, void *context,
                     enum rdma_port_space ps);
    int (*destroy_id)(struct rdma_cm_id *id);
    int (*bind_addr)(struct rdma_cm_id *id, struct sockaddr *addr);
    int (*listen)(struct rdma_cm_id *id, int backlog);
    int (*resolve_addr)(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst,
                        int timeout_ms);
    int (*resolve_route)(struct rdma_cm_id *id, int timeout_ms);
    int (*connect)(struct rdma_cm_id *id, struct rdma_conn_param *param);
    int (*accept)(struct rdma_cm_id *id, struct rdma_conn_param *param);
    int (*reject)(struct rdma_cm_id *id, const void *private_data, uint8_t len);
    int (*disconnect)(struct rdma_cm_id *id);
    int (*create_qp)(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    void (*destroy_qp)(struct rdma_cm_id *id);
    int (*get_cm_event)(struct rdma_event_channel *ch, struct rdma_cm_event **event);
    int (*ack_cm_event)(struct rdma_cm_event *event);
    const char *(*event_str)(enum rdma_cm_event_type event);

    /* devices (libibverbs) */
    struct ibv_device **(*get_device_list)(int *num);
    void (*free_device_list)(struct ibv_device **list);
    const char *(*get_device_name)(struct ibv_device *dev);
    struct ibv_context *(*open_device)(struct ibv_device *dev);
    int (*close_device)(struct ibv_context *ctx);
    int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
    int (*query_port)(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr);

    /* resources and the data path (libibverbs) */
    struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
    int (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
    int (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
    int (*destroy_comp_channel)(struct ibv_comp_channel *cc);
    struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_context,
                                struct ibv_comp_channel *cc, int comp_vector);
    int (*destroy_cq)(struct ibv_cq *cq);
    int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
    int (*get_cq_event)(struct ibv_comp_channel *cc, struct ibv_cq **cq, void **cq_context);
    void (*ack_cq_events)(struct ibv_cq *cq, unsigned int n);
    int (*poll_cq)(struct ibv_cq *cq, int n, struct ibv_wc *wc);
    int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
    const char *(*wc_status_str)(enum ibv_wc_status status);
} rdma_ops;

/* libibverbs and librdmacm. */
extern const rdma_ops rdma_ops_real;

#endif
