# Optional: the compactor (`floe compactor run`) as one Fargate task. It merges
# small objects, enforces retention and deletes orphans; one instance is enough
# (its metastore swaps are compare-and-swap, so a brief overlap during a
# deployment is safe).

locals {
  # Memory sized from the settings: one merge task holds about 2.4x its input
  # bytes at its peak (measured: loadtest/compactor_memory.py, 256 MiB merged in
  # one task -> +612 MiB RSS), so with 3x for headroom and 256 MiB for the
  # process itself, each of the compactor_concurrency tasks may read this much.
  compactor_max_input_mib = floor((var.compactor_memory - 256) / (3 * var.compactor_concurrency))
  compactor_metrics_port  = 9645
  compactor_environment = {
    FLOE_OBJECTS                   = local.objects_url
    FLOE_COMPACTOR_CONCURRENCY     = tostring(var.compactor_concurrency)
    FLOE_COMPACTOR_MAX_INPUT_BYTES = tostring(local.compactor_max_input_mib * 1048576)
    FLOE_COMPACTOR_INTERVAL_MS     = tostring(var.compactor_interval_ms)
  }
}

resource "aws_security_group" "compactor" {
  count = var.enable_compactor ? 1 : 0

  name_prefix = "${var.name}-compactor-"
  description = "Floe compactor: no inbound traffic"
  vpc_id      = var.vpc_id
  tags        = merge(local.tags, { Name = "${var.name}-compactor" })

  lifecycle {
    create_before_destroy = true
  }
}

resource "aws_vpc_security_group_egress_rule" "compactor_https" {
  count = var.enable_compactor ? 1 : 0

  security_group_id = aws_security_group.compactor[0].id
  description       = "HTTPS to AWS APIs (S3, Secrets Manager, ECR, CloudWatch Logs)"
  cidr_ipv4         = "0.0.0.0/0"
  ip_protocol       = "tcp"
  from_port         = 443
  to_port           = 443
}

resource "aws_vpc_security_group_egress_rule" "compactor_postgres" {
  count = var.enable_compactor ? 1 : 0

  security_group_id            = aws_security_group.compactor[0].id
  description                  = "PostgreSQL metastore"
  referenced_security_group_id = aws_security_group.database.id
  ip_protocol                  = "tcp"
  from_port                    = 5432
  to_port                      = 5432
}

resource "aws_vpc_security_group_ingress_rule" "database_from_compactor" {
  count = var.enable_compactor ? 1 : 0

  security_group_id            = aws_security_group.database.id
  description                  = "PostgreSQL from the compactor"
  referenced_security_group_id = aws_security_group.compactor[0].id
  ip_protocol                  = "tcp"
  from_port                    = 5432
  to_port                      = 5432
}

resource "aws_ecs_task_definition" "compactor" {
  count = var.enable_compactor ? 1 : 0

  lifecycle {
    precondition {
      condition     = local.compactor_max_input_mib >= 32
      error_message = "compactor_memory is too small for compactor_concurrency: each merge task needs about 3x its input (at least 32 MiB) plus 256 MiB; raise compactor_memory or lower compactor_concurrency."
    }
  }

  family                   = "${var.name}-compactor"
  requires_compatibilities = ["FARGATE"]
  network_mode             = "awsvpc"
  cpu                      = var.compactor_cpu
  memory                   = var.compactor_memory
  execution_role_arn       = aws_iam_role.execution.arn
  task_role_arn            = aws_iam_role.compactor[0].arn

  runtime_platform {
    operating_system_family = "LINUX"
    cpu_architecture        = var.cpu_architecture
  }

  container_definitions = jsonencode([
    {
      name      = "compactor"
      image     = var.agent_image
      essential = true
      command   = ["compactor", "run", "--metrics-port", tostring(local.compactor_metrics_port)]

      # With the journal tier, FLOE_JOURNAL/FLOE_JOURNAL_QUORUM as the agents get them (journal.tf).
      environment = [for k, v in merge(local.compactor_environment, local.journal_environment) : { name = k, value = v }]

      # Liveness: the compactor finished a task or a pass within the last
      # compactor_max_stall_s (it also fails when the process stops answering).
      healthCheck = {
        command = [
          "CMD", "floe", "compactor", "health",
          "--metrics-port", tostring(local.compactor_metrics_port),
          "--max-stall-s", tostring(var.compactor_max_stall_s),
        ]
        interval    = 30
        timeout     = 10
        retries     = 3
        startPeriod = 120
      }
      secrets = [
        { name = "FLOE_METASTORE", valueFrom = aws_secretsmanager_secret.metastore_dsn.arn },
      ]

      stopTimeout            = 60
      readonlyRootFilesystem = true

      logConfiguration = {
        logDriver = "awslogs"
        options = {
          "awslogs-group"         = aws_cloudwatch_log_group.floe.name
          "awslogs-region"        = local.region
          "awslogs-stream-prefix" = "compactor"
        }
      }
    }
  ])

  tags = local.tags
}

resource "aws_ecs_service" "compactor" {
  count = var.enable_compactor ? 1 : 0

  name            = "${var.name}-compactor"
  cluster         = aws_ecs_cluster.floe.id
  task_definition = aws_ecs_task_definition.compactor[0].arn
  launch_type     = "FARGATE"
  desired_count   = 1

  # Stop the old compactor before starting the new one.
  deployment_minimum_healthy_percent = 0
  deployment_maximum_percent         = 100

  network_configuration {
    subnets          = values(var.agent_subnets)
    security_groups  = [aws_security_group.compactor[0].id]
    assign_public_ip = false
  }

  propagate_tags = "SERVICE"
  tags           = local.tags
}
