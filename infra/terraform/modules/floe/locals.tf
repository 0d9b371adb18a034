data "aws_region" "current" {}

data "aws_partition" "current" {}

locals {
  tags = merge({ "app" = "floe", "floe:name" = var.name }, var.tags)

  # Zones in a fixed order: zone z gets the load balancer listener kafka_port + 1 + z.
  zones      = sort(keys(var.agent_subnets))
  zone_ports = { for i, zone in local.zones : zone => var.kafka_port + 1 + i }

  region     = data.aws_region.current.name
  cluster_id = coalesce(var.cluster_id, var.name)
  aurora     = var.database_engine == "aurora"

  # Agent processes per task (floe agent --workers): one per vCPU unless set.
  agent_workers = var.agent_workers > 0 ? var.agent_workers : max(1, floor(var.agent_cpu / 1024))

  # S3 layout: every Floe object lives under <object_prefix>/ in the bucket.
  bucket_name   = aws_s3_bucket.objects.bucket
  object_prefix = trim(var.object_prefix, "/")
  objects_url   = local.agent_environment["FLOE_OBJECTS"]

  # The agents' one Kafka listener: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL.
  # TLS terminates on the agents (the NLB is TCP pass-through).
  security_protocol = var.enable_sasl ? (var.enable_tls ? "SASL_SSL" : "SASL_PLAINTEXT") : (var.enable_tls ? "SSL" : "PLAINTEXT")
  sasl_mechanisms   = var.enable_sasl ? var.sasl_mechanisms : ""

  # The agent container runs as the image's user (Dockerfile: USER 10001:10001),
  # stated in the task definition so the TLS volume's owner below matches it.
  agent_uid  = 10001
  agent_user = "${local.agent_uid}:${local.agent_uid}"

  # TLS material: the root filesystem is read-only, so the agent writes the
  # TLS_*_PEM secrets (floe_cli/main.py write_pem_secrets) into an ephemeral task
  # volume mounted here (ecs.tf). Fargate creates such a volume root-owned 0755;
  # a short-lived init container gives it to the agent's user first.
  tls_dir      = "/var/lib/floe/tls"
  tls_certfile = var.enable_tls ? "${local.tls_dir}/cert.pem" : ""
  tls_keyfile  = var.enable_tls ? "${local.tls_dir}/key.pem" : ""

  # Authorization: ACLs by default as soon as clients authenticate (variables.tf).
  authorizer  = coalesce(var.authorizer, var.enable_sasl ? "acl" : "none")
  super_users = join(";", var.super_users)

  # Where clients are sent after bootstrapping, per zone: the operator's alias or the NLB's zonal name.
  advertised_hosts = { for zone in local.zones : zone => lookup(var.advertised_hosts, zone, "${zone}.${aws_lb.kafka.dns_name}") }
  bootstrap_host   = coalesce(var.bootstrap_host, aws_lb.kafka.dns_name)

  # The peer credential's secret (FLOE_PEER_TOKEN: /blocks and the /kafka relay between
  # agents, nothing else): the operator's own, or the one the module writes from internal_token.
  internal_token_secret_arn = coalesce(var.internal_token_secret_arn, one(aws_secretsmanager_secret.internal_token[*].arn))

  db_address = local.aurora ? aws_rds_cluster.metastore[0].endpoint : aws_db_instance.metastore[0].address
  db_port    = local.aurora ? aws_rds_cluster.metastore[0].port : aws_db_instance.metastore[0].port

  # THE agent environment (FLOE_* = agent/config.py AgentConfig fields), shared by
  # every zone. tests/infra/test_agent_env.py extracts this map with python-hcl2,
  # substitutes the references below and boots a real agent with it, so keep each
  # value a string literal or an interpolation of var.*, local.bucket_name,
  # local.object_prefix, local.region or local.cluster_id, or tostring() of one
  # (ECS needs strings: a bare "${var.port}" would stay a number); the security
  # locals (security_protocol, tls_*, sasl_mechanisms, authorizer, super_users)
  # are given by that test for the defaults. tests/infra/test_task_boot.py boots
  # the TLS + SASL + ACL task definition as Terraform renders it (tests/boot.tftest.hcl).
  agent_environment = {
    FLOE_HOST               = "0.0.0.0"
    FLOE_PORT               = tostring(var.kafka_port)
    FLOE_ADMIN_PORT         = tostring(var.admin_port)
    FLOE_PEER_ADDRESS       = "auto" # the task's own private IP (awsvpc), for peer traffic
    FLOE_CLUSTER_ID         = tostring(local.cluster_id)
    FLOE_OBJECTS            = "s3://${local.bucket_name}/${local.object_prefix}?region=${local.region}"
    FLOE_FLUSH_BYTES        = tostring(var.flush_bytes)
    FLOE_FLUSH_INTERVAL_MS  = tostring(var.flush_interval_ms)
    FLOE_FETCH_CACHE_BYTES  = tostring(var.fetch_cache_bytes)
    FLOE_AUTO_CREATE_TOPICS = tostring(var.auto_create_topics)
    FLOE_DEFAULT_PARTITIONS = tostring(var.default_partitions)
    # Agent processes per task, read by the CLI (floe agent); worker i: admin_port + i.
    FLOE_WORKERS = tostring(local.agent_workers)
    # Metrics for scaling and alarms: Embedded Metric Format lines on stdout (awslogs).
    FLOE_CLOUDWATCH_EMF_INTERVAL_S = "60"
    FLOE_CLOUDWATCH_NAMESPACE      = tostring(var.cloudwatch_namespace)
    # Security (enable_tls, enable_sasl): the listener's protocol, the TLS files
    # (written from the TLS_* secrets at start) and the SASL mechanisms.
    FLOE_LISTENERS       = "${local.security_protocol}://0.0.0.0:${var.kafka_port}"
    FLOE_SSL_CERTFILE    = local.tls_certfile
    FLOE_SSL_KEYFILE     = local.tls_keyfile
    FLOE_SASL_MECHANISMS = local.sasl_mechanisms
    # Authorization (authorizer, super_users): Kafka ACLs from the metastore.
    FLOE_AUTHORIZER                     = local.authorizer
    FLOE_SUPER_USERS                    = local.super_users
    FLOE_ALLOW_EVERYONE_IF_NO_ACL_FOUND = tostring(var.allow_everyone_if_no_acl_found)
  }

  # Per zone: the zone itself and the address clients are sent to after
  # bootstrapping: the NLB's zonal DNS name (or the operator's alias of it,
  # advertised_hosts) and this zone's listener, so a client stays in the zone of
  # the agent that answered its Metadata request.
  agent_zone_environment = {
    for zone in local.zones : zone => {
      FLOE_ZONE            = zone
      FLOE_ADVERTISED_HOST = local.advertised_hosts[zone]
      FLOE_ADVERTISED_PORT = tostring(local.zone_ports[zone])
      # The listener's advertised endpoint (same address, with its security protocol).
      FLOE_ADVERTISED_LISTENERS = "${local.security_protocol}://${local.advertised_hosts[zone]}:${local.zone_ports[zone]}"
    }
  }

  # Secrets injected by ECS (name => Secrets Manager ARN). The DSN secret holds
  # postgresql://user:password@host:port/db (see secrets.tf).
  agent_secrets = merge(
    {
      FLOE_METASTORE  = aws_secretsmanager_secret.metastore_dsn.arn
      FLOE_PEER_TOKEN = local.internal_token_secret_arn
    },
    var.enable_sasl ? { FLOE_SASL_USERS = aws_secretsmanager_secret.sasl_users[0].arn } : {},
    var.enable_tls ? {
      TLS_CERT_PEM = aws_secretsmanager_secret.tls["certificate"].arn
      TLS_KEY_PEM  = aws_secretsmanager_secret.tls["private-key"].arn
    } : {},
  )

  # ECS wants environment and secrets as sorted lists of {name, value|valueFrom}.
  # The journal tier's FLOE_JOURNAL/FLOE_JOURNAL_QUORUM (journal.tf) join here,
  # only when journal_zones is set.
  agent_environment_lists = {
    for zone in local.zones : zone => [
      for k, v in merge(local.agent_environment, local.journal_environment, local.agent_zone_environment[zone]) : { name = k, value = v }
    ]
  }
  agent_secret_list = [for k, v in local.agent_secrets : { name = k, valueFrom = v }]

  # Container health check: the agent's /healthz, with the interpreter the image has.
  health_check_command = [
    "CMD", "python", "-c",
    "import urllib.request; urllib.request.urlopen('http://127.0.0.1:${var.admin_port}/healthz', timeout=3)",
  ]
}
