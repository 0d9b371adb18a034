# Offline plan/apply of the module against a mocked AWS provider:
#   terraform init -backend=false -plugin-dir=/opt/tf-plugins && terraform test
# (see ../../../README.md). Checks the wiring that matters for Floe: each zone's
# agents get their zone and advertise it, the DSN secret becomes FLOE_METASTORE,
# the bucket is private and encrypted, the database engine switch.

mock_provider "aws" {
  mock_data "aws_region" {
    defaults = {
      name = "us-east-1"
    }
  }
  mock_data "aws_partition" {
    defaults = {
      partition = "aws"
    }
  }
  mock_data "aws_iam_policy_document" {
    defaults = {
      json = "{\"Version\":\"2012-10-17\",\"Statement\":[]}"
    }
  }
  mock_resource "aws_lb" {
    defaults = {
      dns_name = "floe-nlb-0123456789.elb.us-east-1.amazonaws.com"
      arn      = "arn:aws:elasticloadbalancing:us-east-1:123456789012:loadbalancer/net/floe-nlb/0123456789"
    }
  }
  # The provider still validates ARN-typed arguments: give referenced ARNs a real shape.
  mock_resource "aws_sns_topic" {
    defaults = {
      arn = "arn:aws:sns:us-east-1:123456789012:floe-alarms"
    }
  }
  mock_resource "aws_lb_target_group" {
    defaults = {
      arn = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/floe/0123456789"
    }
  }
  mock_resource "aws_iam_role" {
    defaults = {
      arn = "arn:aws:iam::123456789012:role/floe"
    }
  }
  mock_resource "aws_ecs_cluster" {
    defaults = {
      arn = "arn:aws:ecs:us-east-1:123456789012:cluster/floe"
      id  = "arn:aws:ecs:us-east-1:123456789012:cluster/floe"
    }
  }
  mock_resource "aws_ecs_task_definition" {
    defaults = {
      arn = "arn:aws:ecs:us-east-1:123456789012:task-definition/floe-agent:1"
    }
  }
  mock_resource "aws_cloudwatch_log_group" {
    defaults = {
      arn = "arn:aws:logs:us-east-1:123456789012:log-group:/ecs/floe"
    }
  }
  mock_resource "aws_s3_bucket" {
    defaults = {
      bucket = "floe-objects-test"
      arn    = "arn:aws:s3:::floe-objects-test"
    }
  }
  mock_resource "aws_secretsmanager_secret" {
    defaults = {
      arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:floe/metastore-dsn-abc"
    }
  }
  mock_resource "aws_db_instance" {
    defaults = {
      address = "floe-metastore.abc.us-east-1.rds.amazonaws.com"
      port    = 5432
    }
  }
  mock_resource "aws_rds_cluster" {
    defaults = {
      endpoint = "floe-metastore.cluster-abc.us-east-1.rds.amazonaws.com"
      port     = 5432
    }
  }
}

variables {
  vpc_id = "vpc-0123456789abcdef0"
  agent_subnets = {
    "us-east-1a" = "subnet-0aaaaaaaaaaaaaaaa"
    "us-east-1b" = "subnet-0bbbbbbbbbbbbbbbb"
    "us-east-1c" = "subnet-0cccccccccccccccc"
  }
  client_cidr_blocks  = ["10.0.0.0/8"]
  agent_image         = "123456789012.dkr.ecr.us-east-1.amazonaws.com/floe:0.1.0"
  db_password         = "test-password-0123456789"
  internal_token      = "test-internal-token-0123456789abcdef"
  tls_certificate_pem = "-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n"
  tls_private_key_pem = "-----BEGIN PRIVATE KEY-----\ntest\n-----END PRIVATE KEY-----\n"
  # Ephemeral inputs must be set in both the plan and apply phases of a test run.
  sasl_users_json = "{}"
}

run "defaults" {
  command = apply

  assert {
    condition     = length(aws_ecs_service.agent) == 3 && length(aws_lb_listener.zone) == 3
    error_message = "one agent service and one zone listener per availability zone"
  }

  assert {
    condition = alltrue([
      for zone in ["us-east-1a", "us-east-1b", "us-east-1c"] :
      contains(jsondecode(aws_ecs_task_definition.agent[zone].container_definitions)[0].environment, { name = "FLOE_ZONE", value = zone })
    ])
    error_message = "every zone's task definition must set FLOE_ZONE to its own zone"
  }

  assert {
    condition = alltrue([
      for zone, port in { "us-east-1a" = "9093", "us-east-1b" = "9094", "us-east-1c" = "9095" } :
      contains(jsondecode(aws_ecs_task_definition.agent[zone].container_definitions)[0].environment, { name = "FLOE_ADVERTISED_PORT", value = port })
      && contains(jsondecode(aws_ecs_task_definition.agent[zone].container_definitions)[0].environment, { name = "FLOE_ADVERTISED_HOST", value = "${zone}.floe-nlb-0123456789.elb.us-east-1.amazonaws.com" })
    ])
    error_message = "each zone's agents must advertise the NLB zonal DNS name and that zone's listener port"
  }

  assert {
    condition = alltrue([
      for zone in ["us-east-1a", "us-east-1b", "us-east-1c"] :
      contains(jsondecode(aws_ecs_task_definition.agent[zone].container_definitions)[0].environment, { name = "FLOE_PEER_ADDRESS", value = "auto" })
    ])
    error_message = "agents must register their own task IP as peer address (FLOE_PEER_ADDRESS)"
  }

  assert {
    condition = (
      aws_vpc_security_group_ingress_rule.agent_from_agent.from_port == 9644
      && aws_vpc_security_group_ingress_rule.agent_from_agent.referenced_security_group_id == aws_security_group.agent.id
      && aws_vpc_security_group_egress_rule.agent_to_agent.referenced_security_group_id == aws_security_group.agent.id
    )
    error_message = "the peer (admin) port must be open between agent tasks only"
  }

  assert {
    condition     = aws_lb_target_group.zone["us-east-1a"].health_check[0].path == "/readyz" && aws_lb_target_group.bootstrap.health_check[0].path == "/readyz"
    error_message = "target groups must check readiness (/readyz), not liveness"
  }

  assert {
    condition     = aws_lb_listener.zone["us-east-1b"].port == 9094 && aws_lb_listener.bootstrap.port == 9092
    error_message = "bootstrap listener on kafka_port, zone z on kafka_port + 1 + z"
  }

  assert {
    condition = (
      jsondecode(aws_ecs_task_definition.agent["us-east-1a"].container_definitions)[0].secrets
      == [
        { name = "FLOE_METASTORE", valueFrom = aws_secretsmanager_secret.metastore_dsn.arn },
        { name = "FLOE_PEER_TOKEN", valueFrom = aws_secretsmanager_secret.internal_token[0].arn },
      ]
    )
    error_message = "the DSN secret (FLOE_METASTORE) and the peer credential (FLOE_PEER_TOKEN) are injected, nothing else without SASL"
  }

  assert {
    condition = contains(
      jsondecode(aws_ecs_task_definition.agent["us-east-1c"].container_definitions)[0].environment,
      { name = "FLOE_OBJECTS", value = "s3://floe-objects-test/floe?region=us-east-1" }
    )
    error_message = "FLOE_OBJECTS must be s3://bucket/prefix?region=REGION"
  }

  assert {
    condition = alltrue([
      aws_s3_bucket_public_access_block.objects.block_public_acls,
      aws_s3_bucket_public_access_block.objects.block_public_policy,
      aws_s3_bucket_public_access_block.objects.ignore_public_acls,
      aws_s3_bucket_public_access_block.objects.restrict_public_buckets,
    ])
    error_message = "the bucket must block all public access"
  }

  assert {
    condition     = one(one(aws_s3_bucket_server_side_encryption_configuration.objects.rule).apply_server_side_encryption_by_default).sse_algorithm == "AES256"
    error_message = "SSE-S3 by default"
  }

  assert {
    condition     = one(aws_s3_bucket_versioning.objects.versioning_configuration).status == "Disabled"
    error_message = "versioning stays off"
  }

  assert {
    condition     = length(aws_db_instance.metastore) == 1 && length(aws_rds_cluster.metastore) == 0
    error_message = "database_engine = rds creates one RDS instance and no Aurora cluster"
  }

  assert {
    condition = anytrue([
      for p in aws_db_parameter_group.metastore[0].parameter : p.name == "synchronous_commit" && p.value == "on"
    ])
    error_message = "the parameter group must keep synchronous_commit on"
  }

  assert {
    condition     = aws_db_instance.metastore[0].storage_encrypted && !aws_db_instance.metastore[0].publicly_accessible
    error_message = "the database is encrypted and private"
  }

  assert {
    condition     = length(aws_ecs_service.compactor) == 0 && length(aws_secretsmanager_secret.sasl_users) == 0
    error_message = "compactor and SASL are off by default"
  }

  assert {
    condition     = !aws_lb.kafka.enable_cross_zone_load_balancing
    error_message = "cross-zone load balancing must stay off (zone affinity)"
  }

  assert {
    condition     = output.bootstrap_servers == "floe-nlb-0123456789.elb.us-east-1.amazonaws.com:9092"
    error_message = "bootstrap_servers output"
  }

  assert {
    condition     = local.agent_workers == 1 && aws_vpc_security_group_ingress_rule.agent_from_agent.to_port == aws_vpc_security_group_ingress_rule.agent_from_agent.from_port
    error_message = "agent_cpu 1024 runs one agent process per task; the peer rule opens the one admin port"
  }
}

run "workers_per_vcpu" {
  command = plan

  variables {
    agent_cpu    = 4096
    agent_memory = 8192
  }

  assert {
    condition = (
      local.agent_workers == 4
      && local.agent_environment["FLOE_WORKERS"] == "4"
      && aws_vpc_security_group_ingress_rule.agent_from_agent.to_port == 9644 + 3
      && aws_vpc_security_group_egress_rule.agent_to_agent.to_port == 9644 + 3
    )
    error_message = "agent_workers 0: one worker per vCPU, and the peer rules open admin_port .. admin_port + workers - 1"
  }
}

run "aurora_kms_compactor_sasl" {
  command = apply

  variables {
    database_engine  = "aurora"
    postgres_version = "16.4"
    kms_key_arn      = "arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555"
    enable_compactor = true
    enable_sasl      = true
    sasl_users_json  = "{\"alice\":\"secret\"}"
    super_users      = ["User:alice"]
  }

  assert {
    condition     = length(aws_rds_cluster.metastore) == 1 && length(aws_rds_cluster_instance.metastore) == 2 && length(aws_db_instance.metastore) == 0
    error_message = "database_engine = aurora creates a cluster with aurora_instance_count instances"
  }

  assert {
    condition     = one(one(aws_s3_bucket_server_side_encryption_configuration.objects.rule).apply_server_side_encryption_by_default).sse_algorithm == "aws:kms"
    error_message = "a KMS key switches the bucket to SSE-KMS"
  }

  assert {
    condition     = length(aws_cloudwatch_metric_alarm.compactor_failures) == 1 && aws_cloudwatch_log_metric_filter.compactor_failures[0].pattern == "\"compactor pass failed\""
    error_message = "failed compactor passes (their log line) alarm"
  }

  assert {
    condition     = jsondecode(aws_ecs_task_definition.compactor[0].container_definitions)[0].command == ["compactor", "run", "--metrics-port", "9645"]
    error_message = "the compactor runs `floe compactor run` with its metrics (and progress) on 9645"
  }

  assert {
    condition = (
      jsondecode(aws_ecs_task_definition.compactor[0].container_definitions)[0].healthCheck.command
      == ["CMD", "floe", "compactor", "health", "--metrics-port", "9645", "--max-stall-s", "1800"]
    )
    error_message = "the compactor's container health check is `floe compactor health`"
  }

  assert {
    # 4096 MiB, 2 tasks: (4096 - 256) / (3 * 2) = 640 MiB of input per merge task.
    condition = contains(
      jsondecode(aws_ecs_task_definition.compactor[0].container_definitions)[0].environment,
      { name = "FLOE_COMPACTOR_MAX_INPUT_BYTES", value = tostring(640 * 1048576) }
    )
    error_message = "the compactor's per-task input is sized from compactor_memory / compactor_concurrency"
  }

  assert {
    condition = contains(
      jsondecode(aws_ecs_task_definition.agent["us-east-1a"].container_definitions)[0].secrets,
      { name = "FLOE_SASL_USERS", valueFrom = aws_secretsmanager_secret.sasl_users[0].arn }
    )
    error_message = "SASL users are injected from Secrets Manager"
  }
}

run "compactor_memory_too_small_for_its_concurrency" {
  command = plan

  variables {
    enable_compactor      = true
    compactor_memory      = 512
    compactor_concurrency = 4
  }

  expect_failures = [aws_ecs_task_definition.compactor]
}

run "tls_and_sasl" {
  command = apply

  variables {
    enable_tls      = true
    enable_sasl     = true
    sasl_users_json = "{\"alice\":\"secret\"}"
    super_users     = ["User:alice", "User:ops"]
  }

  assert {
    condition = alltrue([
      for zone in ["us-east-1a", "us-east-1b", "us-east-1c"] :
      contains(jsondecode(aws_ecs_task_definition.agent[zone].container_definitions)[1].environment, { name = "FLOE_AUTHORIZER", value = "acl" })
      && contains(jsondecode(aws_ecs_task_definition.agent[zone].container_definitions)[1].environment, { name = "FLOE_SUPER_USERS", value = "User:alice;User:ops" })
    ])
    error_message = "enable_sasl turns the ACL authorizer on by default, with the super users"
  }

  assert {
    condition = (
      jsondecode(aws_ecs_task_definition.agent["us-east-1b"].container_definitions)[0].name == "tls-volume-init"
      && jsondecode(aws_ecs_task_definition.agent["us-east-1b"].container_definitions)[0].command == ["chown 10001:10001 /var/lib/floe/tls && chmod 0700 /var/lib/floe/tls"]
      && [for v in aws_ecs_task_definition.agent["us-east-1b"].volume : v.name] == ["tls"]
    )
    error_message = "enable_tls: an ephemeral volume for the TLS files, handed to the agent's user by an init container"
  }

  assert {
    condition     = output.security_protocol == "SASL_SSL"
    error_message = "enable_tls + enable_sasl = SASL_SSL"
  }

  assert {
    condition = alltrue([
      for zone, port in { "us-east-1a" = "9093", "us-east-1b" = "9094", "us-east-1c" = "9095" } :
      contains(jsondecode(aws_ecs_task_definition.agent[zone].container_definitions)[1].environment, { name = "FLOE_LISTENERS", value = "SASL_SSL://0.0.0.0:9092" })
      && contains(jsondecode(aws_ecs_task_definition.agent[zone].container_definitions)[1].environment, { name = "FLOE_ADVERTISED_LISTENERS", value = "SASL_SSL://${zone}.floe-nlb-0123456789.elb.us-east-1.amazonaws.com:${port}" })
      && contains(jsondecode(aws_ecs_task_definition.agent[zone].container_definitions)[1].environment, { name = "FLOE_SSL_CERTFILE", value = "/var/lib/floe/tls/cert.pem" })
      && contains(jsondecode(aws_ecs_task_definition.agent[zone].container_definitions)[1].environment, { name = "FLOE_SASL_MECHANISMS", value = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512" })
    ])
    error_message = "every zone's agents listen with SASL_SSL on kafka_port and advertise it on their zone's NLB listener"
  }

  assert {
    condition = (
      [for s in jsondecode(aws_ecs_task_definition.agent["us-east-1a"].container_definitions)[1].secrets : s.name]
      == ["FLOE_METASTORE", "FLOE_PEER_TOKEN", "FLOE_SASL_USERS", "TLS_CERT_PEM", "TLS_KEY_PEM"]
    )
    error_message = "the TLS certificate and key, the SASL users, the peer credential and the DSN come from Secrets Manager"
  }

  assert {
    condition     = length(aws_secretsmanager_secret.tls) == 2 && aws_lb_listener.bootstrap.protocol == "TCP"
    error_message = "two TLS secrets; the NLB passes TCP through (TLS ends on the agents)"
  }
}

run "tls_only" {
  command = plan

  variables {
    enable_tls = true
  }

  assert {
    condition     = output.security_protocol == "SSL" && local.agent_environment["FLOE_SASL_MECHANISMS"] == ""
    error_message = "enable_tls alone = SSL, no SASL mechanisms"
  }
}

run "sasl_needs_a_super_user" {
  command = plan

  variables {
    enable_sasl = true
  }

  expect_failures = [var.super_users]
}

run "sasl_without_acls_must_be_explicit" {
  command = plan

  variables {
    enable_sasl = true
    authorizer  = "none"
  }

  assert {
    condition     = local.agent_environment["FLOE_AUTHORIZER"] == "none" && local.agent_environment["FLOE_SUPER_USERS"] == ""
    error_message = "authorizer = none with SASL: authentication only, as asked"
  }
}

run "acls_need_sasl" {
  command = plan

  variables {
    authorizer  = "acl"
    super_users = ["User:admin"]
  }

  expect_failures = [var.authorizer]
}

run "rejects_bad_super_users_and_alias_zones" {
  command = plan

  variables {
    enable_sasl      = true
    super_users      = ["admin"]
    advertised_hosts = { "eu-west-1a" = "kafka-a.example.com" }
  }

  expect_failures = [var.super_users, var.advertised_hosts]
}

run "advertised_host_aliases" {
  command = apply

  variables {
    advertised_hosts = { "us-east-1a" = "kafka-a.example.com", "us-east-1b" = "kafka-b.example.com" }
    bootstrap_host   = "kafka.example.com"
  }

  assert {
    condition = (
      contains(jsondecode(aws_ecs_task_definition.agent["us-east-1a"].container_definitions)[0].environment, { name = "FLOE_ADVERTISED_LISTENERS", value = "PLAINTEXT://kafka-a.example.com:9093" })
      && contains(jsondecode(aws_ecs_task_definition.agent["us-east-1b"].container_definitions)[0].environment, { name = "FLOE_ADVERTISED_HOST", value = "kafka-b.example.com" })
      && contains(jsondecode(aws_ecs_task_definition.agent["us-east-1c"].container_definitions)[0].environment, { name = "FLOE_ADVERTISED_HOST", value = "us-east-1c.floe-nlb-0123456789.elb.us-east-1.amazonaws.com" })
    )
    error_message = "a zone with an alias advertises it; the others keep the NLB zonal name"
  }

  assert {
    condition     = output.bootstrap_servers == "kafka.example.com:9092" && output.zone_bootstrap_servers["us-east-1b"] == "kafka-b.example.com:9094"
    error_message = "the outputs use the aliases"
  }

  assert {
    condition     = length(aws_ecs_task_definition.agent["us-east-1a"].volume) == 0 && length(jsondecode(aws_ecs_task_definition.agent["us-east-1a"].container_definitions)) == 1
    error_message = "no TLS: no volume, no init container"
  }
}

run "internal_token_from_an_existing_secret" {
  # plan: an ephemeral input left unset cannot be applied by terraform test.
  command = plan

  variables {
    internal_token            = null
    internal_token_secret_arn = "arn:aws:secretsmanager:us-east-1:123456789012:secret:shared/floe-internal-token-AbCdEf"
  }

  assert {
    condition = (
      length(aws_secretsmanager_secret.internal_token) == 0
      && contains(local.agent_secret_list, { name = "FLOE_PEER_TOKEN", valueFrom = "arn:aws:secretsmanager:us-east-1:123456789012:secret:shared/floe-internal-token-AbCdEf" })
      && output.internal_token_secret_arn == "arn:aws:secretsmanager:us-east-1:123456789012:secret:shared/floe-internal-token-AbCdEf"
    )
    error_message = "internal_token_secret_arn: the agents read that secret, the module creates none"
  }
}

run "internal_token_needs_a_value_or_a_secret" {
  command = plan

  variables {
    internal_token = null
  }

  expect_failures = [aws_secretsmanager_secret_version.internal_token]
}

run "plaintext_by_default" {
  command = plan

  assert {
    condition     = output.security_protocol == "PLAINTEXT" && local.agent_environment["FLOE_LISTENERS"] == "PLAINTEXT://0.0.0.0:9092" && local.agent_environment["FLOE_SSL_CERTFILE"] == ""
    error_message = "no TLS, no SASL: one PLAINTEXT listener"
  }
}

run "rejects_non_az_zone_keys" {
  command = plan

  variables {
    agent_subnets = {
      "zone-a" = "subnet-0aaaaaaaaaaaaaaaa"
      "zone-b" = "subnet-0bbbbbbbbbbbbbbbb"
    }
  }

  expect_failures = [var.agent_subnets]
}

run "rejects_single_zone" {
  command = plan

  variables {
    agent_subnets = { "us-east-1a" = "subnet-0aaaaaaaaaaaaaaaa" }
  }

  expect_failures = [var.agent_subnets]
}

run "rejects_unknown_engine_and_latest_tag" {
  command = plan

  variables {
    database_engine = "mysql"
    agent_image     = "floe:latest"
  }

  expect_failures = [var.database_engine, var.agent_image]
}

run "aurora_needs_full_version" {
  command = plan

  variables {
    database_engine  = "aurora"
    postgres_version = "16"
  }

  expect_failures = [aws_rds_cluster.metastore]
}

run "alarms" {
  command = apply

  variables {
    alarm_emails = ["oncall@example.com"]
  }

  assert {
    condition     = length(aws_sns_topic.alarms) == 1 && length(aws_sns_topic_subscription.alarm_email) == 1
    error_message = "alarms on by default: one SNS topic, one subscription per e-mail"
  }

  assert {
    condition = (
      length(aws_cloudwatch_metric_alarm.agents_unhealthy) == 3
      && aws_cloudwatch_metric_alarm.agents_unhealthy["us-east-1b"].metric_name == "UnHealthyHostCount"
      && aws_cloudwatch_metric_alarm.agents_unhealthy["us-east-1b"].alarm_actions == toset([aws_sns_topic.alarms[0].arn])
    )
    error_message = "one readiness alarm per zone, notifying the SNS topic"
  }

  assert {
    condition = (
      aws_cloudwatch_metric_alarm.database["cpu"].threshold == 80
      && aws_cloudwatch_metric_alarm.database["storage"].metric_name == "FreeStorageSpace"
      && aws_cloudwatch_metric_alarm.database["storage"].dimensions["DBInstanceIdentifier"] == aws_db_instance.metastore[0].identifier
    )
    error_message = "metastore CPU and free-storage alarms on the RDS instance"
  }

  assert {
    condition     = length(aws_vpc_endpoint.s3) == 0
    error_message = "no S3 endpoint unless route tables are given"
  }

  assert {
    condition = (
      length(aws_cloudwatch_metric_alarm.agent) == 6
      && aws_cloudwatch_metric_alarm.agent["produce-failures-us-east-1a"].metric_name == "ProduceFailures"
      && aws_cloudwatch_metric_alarm.agent["produce-failures-us-east-1a"].dimensions["Zone"] == "us-east-1a"
      && aws_cloudwatch_metric_alarm.agent["commit-latency-us-east-1c"].metric_name == "CommitLatencyP99"
      && aws_cloudwatch_metric_alarm.agent["commit-latency-us-east-1c"].threshold == 250
      && aws_cloudwatch_metric_alarm.agent["commit-latency-us-east-1c"].namespace == "Floe"
    )
    error_message = "produce-failure and commit-latency alarms per zone on the agents' own metrics"
  }

  assert {
    condition     = length(aws_cloudwatch_metric_alarm.compactor_failures) == 0
    error_message = "no compactor alarm without the compactor"
  }

  assert {
    condition = (
      length(aws_appautoscaling_policy.agent_requests) == 3
      && one(aws_appautoscaling_policy.agent_requests["us-east-1a"].target_tracking_scaling_policy_configuration).target_value == 2000
      && one(one(aws_appautoscaling_policy.agent_requests["us-east-1a"].target_tracking_scaling_policy_configuration).customized_metric_specification).metric_name == "ProduceRequestsPerSecond"
    )
    error_message = "each zone also scales on Produce requests per task"
  }

  assert {
    condition = contains(
      jsondecode(aws_ecs_task_definition.agent["us-east-1a"].container_definitions)[0].environment,
      { name = "FLOE_CLOUDWATCH_EMF_INTERVAL_S", value = "60" }
    )
    error_message = "the agents write their metrics for CloudWatch every 60 s"
  }
}

run "s3_gateway_endpoint_and_no_alarms" {
  command = apply

  variables {
    enable_alarms               = false
    s3_endpoint_route_table_ids = ["rtb-0123456789abcdef0", "rtb-0123456789abcdef1"]
  }

  assert {
    condition = (
      length(aws_vpc_endpoint.s3) == 1
      && aws_vpc_endpoint.s3[0].vpc_endpoint_type == "Gateway"
      && aws_vpc_endpoint.s3[0].service_name == "com.amazonaws.us-east-1.s3"
      && length(aws_vpc_endpoint.s3[0].route_table_ids) == 2
    )
    error_message = "an S3 gateway endpoint on the given route tables"
  }

  assert {
    condition     = length(aws_sns_topic.alarms) == 0 && length(aws_cloudwatch_metric_alarm.database) == 0
    error_message = "enable_alarms = false creates no topic and no alarms"
  }
}
