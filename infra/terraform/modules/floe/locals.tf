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
  tls_certfile      = var.enable_tls ? "/var/lib/floe/tls/cert.pem" : ""
  tls_keyfile       = var.enable_tls ? "/var/lib/floe/tls/key.pem" : ""
  sasl_mechanisms   = var.enable_sasl ? var.sasl_mechanisms : ""

  db_address = local.aurora ? aws_rds_cluster.metastore[0].endpoint : aws_db_instance.metastore[0].address
  db_port    = local.aurora ? aws_rds_cluster.metastore[0].port : aws_db_instance.metastore[0].port

  # THE agent environment (FLOE_* = agent/config.py AgentConfig fields), shared by
  # every zone. tests/infra/test_agent_env.py extracts this map with python-hcl2,
  # substitutes the references below and boots a real agent with it, so keep each
  # value a string literal or an interpolation of var.*, local.bucket_name,
  # local.object_prefix, local.region or local.cluster_id, or tostring() of one
  # (ECS needs strings: a bare "${var.port}" would stay a number).
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
  }

  # Per zone: the zone itself and the address clients are sent to after
  # bootstrapping: the NLB's zonal DNS name and this zone's listener, so a client
  # stays in the zone of the agent that answered its Metadata request.
  agent_zone_environment = {
    for zone in local.zones : zone => {
      FLOE_ZONE            = zone
      FLOE_ADVERTISED_HOST = "${zone}.${aws_lb.kafka.dns_name}"
      FLOE_ADVERTISED_PORT = tostring(local.zone_ports[zone])
      # The listener's advertised endpoint (same address, with its security protocol).
      FLOE_ADVERTISED_LISTENERS = "${local.security_protocol}://${zone}.${aws_lb.kafka.dns_name}:${local.zone_ports[zone]}"
    }
  }

  # Secrets injected by ECS (name => Secrets Manager ARN). The DSN secret holds
  # postgresql://user:password@host:port/db (see secrets.tf).
  agent_secrets = merge(
    {
      FLOE_METASTORE      = aws_secretsmanager_secret.metastore_dsn.arn
      FLOE_INTERNAL_TOKEN = aws_secretsmanager_secret.internal_token.arn
    },
    var.enable_sasl ? { FLOE_SASL_USERS = aws_secretsmanager_secret.sasl_users[0].arn } : {},
    var.enable_tls ? {
      TLS_CERT_PEM = aws_secretsmanager_secret.tls["certificate"].arn
      TLS_KEY_PEM  = aws_secretsmanager_secret.tls["private-key"].arn
    } : {},
  )

  # ECS wants environment and secrets as sorted lists of {name, value|valueFrom}.
  agent_environment_lists = {
    for zone in local.zones : zone => [
      for k, v in merge(local.agent_environment, local.agent_zone_environment[zone]) : { name = k, value = v }
    ]
  }
  agent_secret_list = [for k, v in local.agent_secrets : { name = k, valueFrom = v }]

  # Container health check: the agent's /healthz, with the interpreter the image has.
  health_check_command = [
    "CMD", "python", "-c",
    "import urllib.request; urllib.request.urlopen('http://127.0.0.1:${var.admin_port}/healthz', timeout=3)",
  ]
}
